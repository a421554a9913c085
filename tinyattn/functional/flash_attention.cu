// FlashAttention-2 (Dao, 2023) as three CUDA kernels: the GPU path of tinyattn.functional.flash_attention.
// The algorithm is the one FlashAttention in attention.py runs with array ops; here one thread block owns 64 rows
// and streams the other operand through shared memory in tiles of 32 rows, so nothing of size N x M ever exists.
//
// CuPy compiles this file at run time (NVRTC) once per head size, with two constants given as -D options:
//   HEAD_DIM         E, the length of every query, key and value vector (a multiple of 4)
//   THREADS_PER_ROW  T, threads that share one row (1, 2 or 4): each holds E / T of its elements, as float4
//                    chunks c with c % T == its lane in the group, and dot products are summed over the group with
//                    warp shuffles. More threads per row mean fewer registers per thread.
// Layouts, all contiguous float32: q, out, grad_out, grad_q (BH, N, E); k, v, grad_k, grad_v (BHkv, M, E);
// lse, delta (BH, N). Query head bh = b * heads + h reads key/value head b * (heads / groups) + h / groups.
// Scores are kept in base 2 (the scale carries a factor log2(e)) because exp2f is a single instruction.

#define CHUNKS (HEAD_DIM / 4 / THREADS_PER_ROW)   // float4 chunks each thread holds of a row
#define ROW_CHUNKS (HEAD_DIM / 4)                 // float4 chunks in a whole row
#define ROWS 64                                   // rows a thread block owns
#define TILE 32                                   // rows of the other operand per shared-memory tile
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f
#define INF __int_as_float(0x7f800000)   // NVRTC has no math.h and so no INFINITY

typedef float4 Part[CHUNKS];   // this thread's share of one row

__device__ __forceinline__ int lane_in_row() { return threadIdx.x % THREADS_PER_ROW; }

__device__ __forceinline__ float group_sum(float x) {
    for (int offset = THREADS_PER_ROW / 2; offset > 0; offset >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, offset);
    return x;
}

// this thread's chunks of a row in global memory, times factor; zeros for a row past the end
__device__ __forceinline__ void load_part(Part dst, const float4* row, bool exists, float factor) {
#pragma unroll
    for (int i = 0; i < CHUNKS; ++i) {
        float4 x = exists ? row[i * THREADS_PER_ROW + lane_in_row()] : make_float4(0.f, 0.f, 0.f, 0.f);
        dst[i] = make_float4(x.x * factor, x.y * factor, x.z * factor, x.w * factor);
    }
}

__device__ __forceinline__ void store_part(float4* row, const Part src, float factor) {
#pragma unroll
    for (int i = 0; i < CHUNKS; ++i)
        row[i * THREADS_PER_ROW + lane_in_row()] = make_float4(src[i].x * factor, src[i].y * factor,
                                                               src[i].z * factor, src[i].w * factor);
}

__device__ __forceinline__ void zero_part(Part x) {
#pragma unroll
    for (int i = 0; i < CHUNKS; ++i) x[i] = make_float4(0.f, 0.f, 0.f, 0.f);
}

// this thread's share of the dot product of its part with a whole row (in shared memory)
__device__ __forceinline__ float partial_dot(const Part a, const float4* row) {
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < CHUNKS; ++i) {
        float4 b = row[i * THREADS_PER_ROW + lane_in_row()];
        sum += a[i].x * b.x + a[i].y * b.y + a[i].z * b.z + a[i].w * b.w;
    }
    return sum;
}

// acc += weight * row (this thread's chunks of it)
__device__ __forceinline__ void add_scaled(Part acc, float weight, const float4* row) {
#pragma unroll
    for (int i = 0; i < CHUNKS; ++i) {
        float4 b = row[i * THREADS_PER_ROW + lane_in_row()];
        acc[i].x += weight * b.x; acc[i].y += weight * b.y; acc[i].z += weight * b.z; acc[i].w += weight * b.w;
    }
}

// rows first .. first + TILE - 1 of a (rows, E) matrix into shared memory, zeros past its end
__device__ __forceinline__ void stage_tile(float4 tile[TILE][ROW_CHUNKS], const float4* matrix, int first,
                                           int rows) {
    for (int i = threadIdx.x; i < TILE * ROW_CHUNKS; i += blockDim.x) {
        int r = i / ROW_CHUNKS, c = i % ROW_CHUNKS;
        tile[r][c] = first + r < rows ? matrix[(size_t)(first + r) * ROW_CHUNKS + c]
                                      : make_float4(0.f, 0.f, 0.f, 0.f);
    }
}

__device__ __forceinline__ int kv_head(int bh, int heads, int groups) {
    return (bh / heads) * (heads / groups) + (bh % heads) / groups;
}

// Keys a block of query rows can see: all of them, or with causal masking (key j visible to row i iff j <= i)
// only up to the block's last row.
__device__ __forceinline__ int visible_keys(int m, int n, bool causal) {
    return causal ? min(m, min(n, (int)(blockIdx.x + 1) * ROWS)) : m;
}

extern "C" __global__ void __launch_bounds__(ROWS * THREADS_PER_ROW)
flash_forward(const float* q, const float* k, const float* v, float* out, float* lse,
              int n, int m, int heads, int groups, float scale, int causal) {
    __shared__ float4 k_tile[TILE][ROW_CHUNKS], v_tile[TILE][ROW_CHUNKS];
    const int row = blockIdx.x * ROWS + threadIdx.x / THREADS_PER_ROW, bh = blockIdx.y;
    const int kv = kv_head(bh, heads, groups);
    const float4 *k4 = (const float4*)k + (size_t)kv * m * ROW_CHUNKS, *v4 = (const float4*)v + (size_t)kv * m * ROW_CHUNKS;
    const bool live = row < n;   // threads past the last row still stage tiles and join the shuffles
    Part query, acc;
    load_part(query, (const float4*)q + ((size_t)bh * n + row) * ROW_CHUNKS, live, scale * LOG2E);
    zero_part(acc);
    float running_max = -INF, running_sum = 0.f;
    const int key_end = visible_keys(m, n, causal);
    for (int first = 0; first < key_end; first += TILE) {
        __syncthreads();   // every thread is done with the previous tile
        stage_tile(k_tile, k4, first, m);
        stage_tile(v_tile, v4, first, m);
        __syncthreads();
        float score[TILE], tile_max = -INF;
#pragma unroll
        for (int j = 0; j < TILE; ++j) {
            float s = group_sum(partial_dot(query, k_tile[j]));
            int key = first + j;
            score[j] = key < m && (!causal || key <= row) ? s : -INF;
            tile_max = fmaxf(tile_max, score[j]);
        }
        float new_max = fmaxf(running_max, tile_max);
        if (new_max == -INF) continue;   // nothing visible to this row yet
        float rescale = exp2f(running_max - new_max);   // 0 on the first visible tile
        running_sum *= rescale;
#pragma unroll
        for (int i = 0; i < CHUNKS; ++i) {
            acc[i].x *= rescale; acc[i].y *= rescale; acc[i].z *= rescale; acc[i].w *= rescale;
        }
#pragma unroll
        for (int j = 0; j < TILE; ++j) {
            float p = exp2f(score[j] - new_max);
            running_sum += p;
            add_scaled(acc, p, v_tile[j]);
        }
        running_max = new_max;
    }
    if (!live) return;
    // a row that saw no key: output 0 and L = +inf, so the backward's exp(S - L) is 0 there
    store_part((float4*)out + ((size_t)bh * n + row) * ROW_CHUNKS, acc, running_sum > 0.f ? 1.f / running_sum : 0.f);
    if (lane_in_row() == 0)
        lse[(size_t)bh * n + row] = running_sum > 0.f ? (running_max + log2f(running_sum)) * LN2 : INF;
}

// dQ_i = scale * sum_j P_ij (dP_ij - D_i) K_j, with P_ij = exp(S_ij - L_i) recomputed and dP_ij = dO_i . V_j
extern "C" __global__ void __launch_bounds__(ROWS * THREADS_PER_ROW)
flash_backward_q(const float* q, const float* k, const float* v, const float* grad_out, const float* lse,
                 const float* delta, float* grad_q, int n, int m, int heads, int groups, float scale, int causal) {
    __shared__ float4 k_tile[TILE][ROW_CHUNKS], v_tile[TILE][ROW_CHUNKS];
    const int row = blockIdx.x * ROWS + threadIdx.x / THREADS_PER_ROW, bh = blockIdx.y;
    const int kv = kv_head(bh, heads, groups);
    const float4 *k4 = (const float4*)k + (size_t)kv * m * ROW_CHUNKS, *v4 = (const float4*)v + (size_t)kv * m * ROW_CHUNKS;
    const bool live = row < n;
    const size_t at = (size_t)bh * n + row;
    Part query, grad_row, acc;
    load_part(query, (const float4*)q + at * ROW_CHUNKS, live, scale * LOG2E);
    load_part(grad_row, (const float4*)grad_out + at * ROW_CHUNKS, live, 1.f);
    zero_part(acc);
    const float row_lse = live ? lse[at] * LOG2E : INF, row_delta = live ? delta[at] : 0.f;
    const int key_end = visible_keys(m, n, causal);
    for (int first = 0; first < key_end; first += TILE) {
        __syncthreads();
        stage_tile(k_tile, k4, first, m);
        stage_tile(v_tile, v4, first, m);
        __syncthreads();
#pragma unroll 4
        for (int j = 0; j < TILE; ++j) {
            float s = group_sum(partial_dot(query, k_tile[j]));
            float grad_p = group_sum(partial_dot(grad_row, v_tile[j]));
            int key = first + j;
            float p = key < m && (!causal || key <= row) ? exp2f(s - row_lse) : 0.f;
            add_scaled(acc, p * (grad_p - row_delta), k_tile[j]);
        }
    }
    if (live) store_part((float4*)grad_q + at * ROW_CHUNKS, acc, scale);
}

// Per key j of key/value head kv, summed over every query row i of every query head that reads it:
// dV_j = sum_i P_ij dO_i,  dK_j = scale * sum_i P_ij (dP_ij - D_i) Q_i. One thread block owns 64 keys.
extern "C" __global__ void __launch_bounds__(ROWS * THREADS_PER_ROW)
flash_backward_kv(const float* q, const float* k, const float* v, const float* grad_out, const float* lse,
                  const float* delta, float* grad_k, float* grad_v, int n, int m, int heads, int groups, float scale,
                  int causal) {
    __shared__ float4 q_tile[TILE][ROW_CHUNKS], grad_tile[TILE][ROW_CHUNKS];
    __shared__ float lse_tile[TILE], delta_tile[TILE];
    const int key = blockIdx.x * ROWS + threadIdx.x / THREADS_PER_ROW, kv = blockIdx.y;
    const int kv_heads = heads / groups, b = kv / kv_heads, first_head = b * heads + (kv % kv_heads) * groups;
    const bool live = key < m;
    const size_t at = (size_t)kv * m + key;
    Part key_row, value_row, grad_k_acc, grad_v_acc;
    load_part(key_row, (const float4*)k + at * ROW_CHUNKS, live, scale * LOG2E);
    load_part(value_row, (const float4*)v + at * ROW_CHUNKS, live, 1.f);
    zero_part(grad_k_acc);
    zero_part(grad_v_acc);
    // causal: rows before this block's first key see none of its keys
    const int first_row = causal ? (int)blockIdx.x * ROWS : 0;
    for (int bh = first_head; bh < first_head + groups; ++bh) {
        const float4 *q4 = (const float4*)q + (size_t)bh * n * ROW_CHUNKS;
        const float4 *g4 = (const float4*)grad_out + (size_t)bh * n * ROW_CHUNKS;
        for (int first = first_row; first < n; first += TILE) {
            __syncthreads();
            stage_tile(q_tile, q4, first, n);
            stage_tile(grad_tile, g4, first, n);
            for (int i = threadIdx.x; i < TILE; i += blockDim.x) {
                bool exists = first + i < n;
                lse_tile[i] = exists ? lse[(size_t)bh * n + first + i] * LOG2E : INF;
                delta_tile[i] = exists ? delta[(size_t)bh * n + first + i] : 0.f;
            }
            __syncthreads();
#pragma unroll 4
            for (int i = 0; i < TILE; ++i) {
                float s = group_sum(partial_dot(key_row, q_tile[i]));
                float grad_p = group_sum(partial_dot(value_row, grad_tile[i]));
                int row = first + i;
                float p = row < n && (!causal || key <= row) ? exp2f(s - lse_tile[i]) : 0.f;
                add_scaled(grad_v_acc, p, grad_tile[i]);
                add_scaled(grad_k_acc, p * (grad_p - delta_tile[i]), q_tile[i]);
            }
        }
    }
    if (!live) return;
    store_part((float4*)grad_k + at * ROW_CHUNKS, grad_k_acc, scale);
    store_part((float4*)grad_v + at * ROW_CHUNKS, grad_v_acc, 1.f);
}
