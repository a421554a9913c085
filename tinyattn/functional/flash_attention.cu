// FlashAttention-2 (Dao, 2023) on tensor cores: the GPU path of tinyattn.functional.flash_attention.
// The algorithm is the one flash_attention.py writes with array ops. A thread block of 4 warps owns 64 rows (query
// rows in the forward and dQ kernels, key rows in the dK/dV kernel), 16 per warp, kept in shared memory, and streams
// the other operand through shared memory in tiles of TILE rows, so nothing of size N x M ever exists. Every product
// of two blocks runs on the tensor cores (mma.sync m16n8k8, TF32 inputs, float32 sums); the online softmax works on
// the products' float32 results in the registers where mma leaves them.
//
// CuPy compiles this file at run time (NVRTC), with three constants given as -D options:
//   HEAD_DIM  E, the length of every query, key and value vector: a multiple of 4 up to 128
//   TILE      rows of the streamed operand per shared-memory tile: a multiple of 8
//   SPLIT     1: every float32 operand x goes in as two TF32 numbers, x = big + small, and a product as
//             big*big + big*small + small*big (3xTF32; small*small is below float32's rounding): float32's accuracy
//             for three tensor-core instructions. 0: one TF32 product (10-bit mantissas: 3e-4 to 7e-4 relative).
// Layouts, all contiguous float32: q, out, grad_out, grad_q (BH, N, E); k, v, grad_k, grad_v (BHkv, M, E);
// lse, delta (BH, N). Query head bh = b * heads + h reads key/value head b * (heads / groups) + h / groups.
// Scores are kept in base 2 (the scale carries a factor log2(e)) because exp2f is a single instruction.
//
// mma's fragments: lane l of a warp is in group g = l / 4 and has index t = l % 4 in it. For C (16 x 8) += A (16 x 8)
// B (8 x 8), the lane holds A[g][t], A[g + 8][t], A[g][t + 4], A[g + 8][t + 4], B[t][g], B[t + 4][g], and
// C[g][2t], C[g][2t + 1], C[g + 8][2t], C[g + 8][2t + 1].

#define ROWS 64                          // rows a thread block owns: 4 warps of 16
#define THREADS 128
#define DIM ((HEAD_DIM + 7) / 8 * 8)     // E rounded up to mma's 8-wide steps; the columns past E hold zeros
#define STEPS (DIM / 8)                  // 8-wide column blocks of a row
#define PARTS (TILE / 8)                 // 8-row blocks of a tile
// A row in shared memory: 4 floats more than DIM put the 8 rows that a warp reads at once in different banks.
#define STRIDE (DIM + 4)
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f
#define INF __int_as_float(0x7f800000)   // NVRTC has no math.h and so no INFINITY
#define ALL_LANES 0xffffffffu

struct Operand { unsigned big, small; };   // a float32 as TF32 numbers: x = big + small (small is 0 unless SPLIT)

__device__ __forceinline__ unsigned to_tf32(float x) {
    unsigned rounded;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(rounded) : "f"(x));
    return rounded;
}

__device__ __forceinline__ Operand split(float x) {
    Operand o;
    o.big = to_tf32(x);
    o.small = SPLIT ? to_tf32(x - __uint_as_float(o.big)) : 0u;   // x - big is exact in float32
    return o;
}

// c += a b for one 16 x 8 x 8 step, a and b as TF32
__device__ __forceinline__ void mma_tf32(float c[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                         unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The tensor cores round their sums toward zero. Chained onto one accumulator, mma after mma, that error grows with
// the number of steps, as a bias (measured with SPLIT: dK and dV 5.5e-6 relative at 512 keys, and growing). So each
// product of blocks is summed in fresh registers and added to its running total in float32, and with SPLIT the small
// corrections (a.small b.big + a.big b.small) are summed apart from the big products, each sum among numbers of its
// own size (measured: 7e-7 at 512 keys).
__device__ __forceinline__ void mma_big(float c[4], const Operand a[4], const Operand b[2]) {
    mma_tf32(c, a[0].big, a[1].big, a[2].big, a[3].big, b[0].big, b[1].big);
}

__device__ __forceinline__ void mma_corrections(float c[4], const Operand a[4], const Operand b[2]) {
#if SPLIT
    mma_tf32(c, a[0].small, a[1].small, a[2].small, a[3].small, b[0].big, b[1].big);
    mma_tf32(c, a[0].big, a[1].big, a[2].big, a[3].big, b[0].small, b[1].small);
#endif
}

__device__ __forceinline__ int warp_id() { return threadIdx.x / 32; }
__device__ __forceinline__ int group_id() { return threadIdx.x % 32 / 4; }
__device__ __forceinline__ int index_in_group() { return threadIdx.x % 4; }

// s[j] = A B_j^T for j < PARTS: A is a warp's 16 rows (at a), B_j rows 8j .. 8j + 7 of a tile (at b), both in shared
// memory and multiplied along their DIM columns. The lane is left holding s[j][0], s[j][1] = S[g][8j + 2t],
// S[g][8j + 2t + 1] and s[j][2], s[j][3] the same two columns of row g + 8.
__device__ __forceinline__ void products(float s[PARTS][4], const float* a, const float* b) {
    const int g = group_id(), t = index_in_group();
    float fine[PARTS][4] = {};   // the small corrections (zero without SPLIT)
#pragma unroll
    for (int j = 0; j < PARTS; ++j)
        s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll 2
    for (int k = 0; k < DIM; k += 8) {
        const Operand x[4] = {split(a[g * STRIDE + k + t]), split(a[(g + 8) * STRIDE + k + t]),
                              split(a[g * STRIDE + k + t + 4]), split(a[(g + 8) * STRIDE + k + t + 4])};
#pragma unroll
        for (int j = 0; j < PARTS; ++j) {
            const float* row = b + (8 * j + g) * STRIDE + k;
            const Operand y[2] = {split(row[t]), split(row[t + 4])};
            mma_corrections(fine[j], x, y);
            mma_big(s[j], x, y);
        }
    }
#if SPLIT
#pragma unroll
    for (int j = 0; j < PARTS; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) s[j][i] += fine[j][i];
#endif
}

// acc[d] += P B[:, 8d .. 8d + 7] for d < STEPS: P (16 x TILE) in the layout products() leaves, B a tile (TILE x DIM,
// at b). mma wants columns t and t + 4 of each 8 of P in this lane, which holds columns 2t and 2t + 1. A sum does not
// depend on the order of its terms: P's columns 2t, 2t + 1 go in as columns t, t + 4, and B's rows 2t, 2t + 1 as its
// rows t, t + 4, so no value has to move between lanes. The tile's sum is made CHUNK column blocks at a time, in
// fresh registers (see mma_big), and then added to acc.
#define CHUNK 4
__device__ __forceinline__ void accumulate(float acc[STEPS][4], const float p[PARTS][4], const float* b) {
    const int g = group_id(), t = index_in_group();
#pragma unroll
    for (int first = 0; first < STEPS; first += CHUNK) {
        float sum[CHUNK][4] = {}, fine[CHUNK][4] = {};
#pragma unroll
        for (int j = 0; j < PARTS; ++j) {
            const Operand x[4] = {split(p[j][0]), split(p[j][2]), split(p[j][1]), split(p[j][3])};
            const float* rows = b + (8 * j + 2 * t) * STRIDE + g;   // B's rows 8j + 2t and 8j + 2t + 1
#pragma unroll
            for (int d = 0; d < CHUNK && first + d < STEPS; ++d) {
                const Operand y[2] = {split(rows[8 * (first + d)]), split(rows[STRIDE + 8 * (first + d)])};
                mma_corrections(fine[d], x, y);
                mma_big(sum[d], x, y);
            }
        }
#pragma unroll
        for (int d = 0; d < CHUNK && first + d < STEPS; ++d)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[first + d][i] += SPLIT ? sum[d][i] + fine[d][i] : sum[d][i];
    }
}

// rows first .. first + count - 1 of a (rows, HEAD_DIM) matrix into shared memory, times factor, in rows of STRIDE
// floats; zeros for rows past the end and for the columns HEAD_DIM .. DIM - 1 (they add nothing to a product)
__device__ __forceinline__ void stage(float* tile, const float* matrix, int first, int count, int rows,
                                      float factor) {
    for (int i = threadIdx.x; i < count * (DIM / 4); i += THREADS) {
        const int r = i / (DIM / 4), c = 4 * (i % (DIM / 4));
        float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
        if (first + r < rows && c < HEAD_DIM)
            x = *(const float4*)(matrix + (size_t)(first + r) * HEAD_DIM + c);
        *(float4*)(tile + r * STRIDE + c) = make_float4(x.x * factor, x.y * factor, x.z * factor, x.w * factor);
    }
}

// this lane's columns 8d + 2t, 8d + 2t + 1 of rows row and row + 8 (acc's layout) into a (rows, HEAD_DIM) matrix
__device__ __forceinline__ void store_rows(float* matrix, const float acc[STEPS][4], int row, int rows,
                                           float factor0, float factor1) {
    const int t = index_in_group();
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int r = row + 8 * half;
        const float factor = half ? factor1 : factor0;
        if (r >= rows) continue;
#pragma unroll
        for (int d = 0; d < STEPS; ++d) {
            const int c = 8 * d + 2 * t;
            if (c < HEAD_DIM)
                *(float2*)(matrix + (size_t)r * HEAD_DIM + c) =
                    make_float2(acc[d][2 * half] * factor, acc[d][2 * half + 1] * factor);
        }
    }
}

// the sum (or max) over the 4 lanes of a group: they hold the same two rows
__device__ __forceinline__ float group_sum(float x) {
    x += __shfl_xor_sync(ALL_LANES, x, 1);
    return x + __shfl_xor_sync(ALL_LANES, x, 2);
}

__device__ __forceinline__ float group_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(ALL_LANES, x, 1));
    return fmaxf(x, __shfl_xor_sync(ALL_LANES, x, 2));
}

__device__ __forceinline__ int kv_head(int bh, int heads, int groups) {
    return (bh / heads) * (heads / groups) + (bh % heads) / groups;
}

// With causal masking the last row blocks see the most keys: they are handed out first, so that no long block
// starts when the others are nearly done.
__device__ __forceinline__ int first_query_row(bool causal) {
    return (causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * ROWS;
}

// key j is visible to query row i iff j exists and, with causal masking, j <= i
__device__ __forceinline__ bool visible(int key, int row, int m, bool causal) {
    return key < m && (!causal || key <= row);
}

extern "C" __global__ void __launch_bounds__(THREADS)
flash_forward(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
              float* __restrict__ out, float* __restrict__ lse, int n, int m, int heads, int groups, float scale,
              int causal) {
    extern __shared__ float4 shared[];
    float* q_rows = (float*)shared;
    float* k_tile = q_rows + ROWS * STRIDE;
    float* v_tile = k_tile + TILE * STRIDE;
    const int first_row = first_query_row(causal), bh = blockIdx.y, kv = kv_head(bh, heads, groups);
    const int warp = warp_id(), t = index_in_group();
    const int row = first_row + 16 * warp + group_id();   // this lane's rows: row and row + 8
    stage(q_rows, q + (size_t)bh * n * HEAD_DIM, first_row, ROWS, n, scale * LOG2E);
    float acc[STEPS][4] = {}, running_max[2] = {-INF, -INF}, running_sum[2] = {0.f, 0.f};
    const int key_end = causal ? min(m, first_row + ROWS) : m;
    for (int first = 0; first < key_end; first += TILE) {
        __syncthreads();   // every warp is done with the previous tile (and q_rows is in place)
        stage(k_tile, k + (size_t)kv * m * HEAD_DIM, first, TILE, m, 1.f);
        stage(v_tile, v + (size_t)kv * m * HEAD_DIM, first, TILE, m, 1.f);
        __syncthreads();
        if (causal && first > first_row + 16 * warp + 15) continue;   // the whole tile lies after this warp's rows
        float s[PARTS][4], tile_max[2] = {-INF, -INF};
        products(s, q_rows + 16 * warp * STRIDE, k_tile);
#pragma unroll
        for (int j = 0; j < PARTS; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                if (!visible(first + 8 * j + 2 * t + i % 2, row + 8 * (i / 2), m, causal)) s[j][i] = -INF;
                tile_max[i / 2] = fmaxf(tile_max[i / 2], s[j][i]);
            }
        float rescale[2], shift[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float new_max = fmaxf(running_max[h], group_max(tile_max[h]));
            shift[h] = new_max == -INF ? 0.f : new_max;   // nothing visible yet: exp2(-inf - 0) = 0, not NaN
            rescale[h] = exp2f(running_max[h] - shift[h]);
            running_max[h] = new_max;
            running_sum[h] *= rescale[h];
        }
#pragma unroll
        for (int j = 0; j < PARTS; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                s[j][i] = exp2f(s[j][i] - shift[i / 2]);
                running_sum[i / 2] += s[j][i];   // this lane's share of the row sum, added up at the end
            }
#pragma unroll
        for (int d = 0; d < STEPS; ++d)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[d][i] *= rescale[i / 2];
        accumulate(acc, s, v_tile);
    }
    float inverse[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const float sum = group_sum(running_sum[h]);
        // a row that saw no key: output 0 and L = +inf, so the backward's exp(S - L) is 0 there
        inverse[h] = sum > 0.f ? 1.f / sum : 0.f;
        if (t == 0 && row + 8 * h < n)
            lse[(size_t)bh * n + row + 8 * h] = sum > 0.f ? (running_max[h] + log2f(sum)) * LN2 : INF;
    }
    store_rows(out + (size_t)bh * n * HEAD_DIM, acc, row, n, inverse[0], inverse[1]);
}

// dQ_i = scale * sum_j dS_ij K_j with dS_ij = P_ij (dP_ij - D_i), P_ij = exp(S_ij - L_i) recomputed, dP = dO V^T
extern "C" __global__ void __launch_bounds__(THREADS)
flash_backward_q(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                 const float* __restrict__ grad_out, const float* __restrict__ lse, const float* __restrict__ delta,
                 float* __restrict__ grad_q, int n, int m, int heads, int groups, float scale, int causal) {
    extern __shared__ float4 shared[];
    float* q_rows = (float*)shared;
    float* grad_rows = q_rows + ROWS * STRIDE;
    float* k_tile = grad_rows + ROWS * STRIDE;
    float* v_tile = k_tile + TILE * STRIDE;
    const int first_row = first_query_row(causal), bh = blockIdx.y, kv = kv_head(bh, heads, groups);
    const int warp = warp_id(), t = index_in_group();
    const int row = first_row + 16 * warp + group_id();
    stage(q_rows, q + (size_t)bh * n * HEAD_DIM, first_row, ROWS, n, scale * LOG2E);
    stage(grad_rows, grad_out + (size_t)bh * n * HEAD_DIM, first_row, ROWS, n, 1.f);
    float row_lse[2], row_delta[2], acc[STEPS][4] = {};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const bool exists = row + 8 * h < n;
        row_lse[h] = exists ? lse[(size_t)bh * n + row + 8 * h] * LOG2E : INF;
        row_delta[h] = exists ? delta[(size_t)bh * n + row + 8 * h] : 0.f;
    }
    const int key_end = causal ? min(m, first_row + ROWS) : m;
    for (int first = 0; first < key_end; first += TILE) {
        __syncthreads();
        stage(k_tile, k + (size_t)kv * m * HEAD_DIM, first, TILE, m, 1.f);
        stage(v_tile, v + (size_t)kv * m * HEAD_DIM, first, TILE, m, 1.f);
        __syncthreads();
        if (causal && first > first_row + 16 * warp + 15) continue;
        float s[PARTS][4], grad_p[PARTS][4];
        products(s, q_rows + 16 * warp * STRIDE, k_tile);
        products(grad_p, grad_rows + 16 * warp * STRIDE, v_tile);
#pragma unroll
        for (int j = 0; j < PARTS; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float p = visible(first + 8 * j + 2 * t + i % 2, row + 8 * (i / 2), m, causal)
                                ? exp2f(s[j][i] - row_lse[i / 2]) : 0.f;
                s[j][i] = p * (grad_p[j][i] - row_delta[i / 2]);   // dS, in place of S
            }
        accumulate(acc, s, k_tile);
    }
    store_rows(grad_q + (size_t)bh * n * HEAD_DIM, acc, row, n, scale, scale);
}

// Per key j of key/value head kv, summed over every query row i of every query head that reads it:
// dV_j = sum_i P_ij dO_i,  dK_j = scale * sum_i dS_ij Q_i. The warps hold S^T, the keys' rows of S.
extern "C" __global__ void __launch_bounds__(THREADS)
flash_backward_kv(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                  const float* __restrict__ grad_out, const float* __restrict__ lse,
                  const float* __restrict__ delta, float* __restrict__ grad_k, float* __restrict__ grad_v, int n,
                  int m, int heads, int groups, float scale, int causal) {
    extern __shared__ float4 shared[];
    float* k_rows = (float*)shared;
    float* v_rows = k_rows + ROWS * STRIDE;
    float* q_tile = v_rows + ROWS * STRIDE;
    float* grad_tile = q_tile + TILE * STRIDE;
    float* lse_tile = grad_tile + TILE * STRIDE;
    float* delta_tile = lse_tile + TILE;
    const int first_key = blockIdx.x * ROWS, kv = blockIdx.y;
    const int kv_heads = heads / groups, first_head = (kv / kv_heads) * heads + (kv % kv_heads) * groups;
    const int warp = warp_id(), t = index_in_group();
    const int key = first_key + 16 * warp + group_id();   // this lane's keys: key and key + 8
    stage(k_rows, k + (size_t)kv * m * HEAD_DIM, first_key, ROWS, m, scale * LOG2E);
    stage(v_rows, v + (size_t)kv * m * HEAD_DIM, first_key, ROWS, m, 1.f);
    float grad_k_acc[STEPS][4] = {}, grad_v_acc[STEPS][4] = {};
    // causal: rows before this block's first key see none of its keys
    const int first_row = causal ? first_key : 0;
    for (int bh = first_head; bh < first_head + groups; ++bh) {
        for (int first = first_row; first < n; first += TILE) {
            __syncthreads();
            stage(q_tile, q + (size_t)bh * n * HEAD_DIM, first, TILE, n, 1.f);
            stage(grad_tile, grad_out + (size_t)bh * n * HEAD_DIM, first, TILE, n, 1.f);
            for (int i = threadIdx.x; i < TILE; i += THREADS) {
                const bool exists = first + i < n;
                lse_tile[i] = exists ? lse[(size_t)bh * n + first + i] * LOG2E : INF;
                delta_tile[i] = exists ? delta[(size_t)bh * n + first + i] : 0.f;
            }
            __syncthreads();
            if (causal && first + TILE - 1 < first_key + 16 * warp) continue;   // the whole tile is before these keys
            float s_t[PARTS][4], grad_p_t[PARTS][4];   // S^T and dP^T = V dO^T, this warp's 16 keys x TILE rows
            products(s_t, k_rows + 16 * warp * STRIDE, q_tile);
            products(grad_p_t, v_rows + 16 * warp * STRIDE, grad_tile);
#pragma unroll
            for (int j = 0; j < PARTS; ++j)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int r = 8 * j + 2 * t + i % 2;   // the row within the tile
                    const float p = first + r < n && visible(key + 8 * (i / 2), first + r, m, causal)
                                    ? exp2f(s_t[j][i] - lse_tile[r]) : 0.f;
                    s_t[j][i] = p;
                    grad_p_t[j][i] = p * (grad_p_t[j][i] - delta_tile[r]);   // dS^T
                }
            accumulate(grad_v_acc, s_t, grad_tile);
            accumulate(grad_k_acc, grad_p_t, q_tile);
        }
    }
    store_rows(grad_k + (size_t)kv * m * HEAD_DIM, grad_k_acc, key, m, scale, scale);
    store_rows(grad_v + (size_t)kv * m * HEAD_DIM, grad_v_acc, key, m, 1.f, 1.f);
}
