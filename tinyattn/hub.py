"""Model folders in Hugging Face's layout: find one (a local folder, or a hub name fetched by huggingface_hub into
its usual cache), read its config.json and its safetensors weights (one file or shards listed in
model.safetensors.index.json), and write one.

This file knows folders and files only; what the keys and settings mean for a model family is translated beside the
model (models/hf_gpt2.py, models/hf_vit.py).
"""
import json
import os
import re

import numpy

from .serialization import read_safetensors, safetensors_bytes, stage

WEIGHTS, INDEX, CONFIG = "model.safetensors", "model.safetensors.index.json", "config.json"
# what a model folder holds that tinyattn reads; a hub download fetches only these
FILES = [CONFIG, WEIGHTS, INDEX, "model-*.safetensors", "tokenizer.json", "vocab.json", "merges.txt",
         "tokenizer_config.json", "preprocessor_config.json"]


# a hub repository id, as huggingface_hub checks it: name or owner/name, each part at most 96 characters
HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]{0,95}(/[A-Za-z0-9][\w.-]{0,95})?")


class PretrainedError(ValueError):
    """A model folder or hub name that cannot be read, saying which file or setting and what to do."""


def resolve(name_or_folder):
    """The local folder of name_or_folder: itself when it is a folder, else the hub model of that name, downloaded
    (or found in the cache) through huggingface_hub."""
    name = os.fspath(name_or_folder)
    if os.path.isdir(name):
        return name
    if os.path.exists(name) or name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise PretrainedError(f"{name} is not a folder; from_pretrained takes a folder holding {CONFIG} and "
                              f"{WEIGHTS}, or a Hugging Face hub name such as 'gpt2'")
    if not HUB_NAME.fullmatch(name) or ".." in name or "--" in name:
        raise PretrainedError(f"{name!r} is neither a folder nor a valid Hugging Face hub name (a name or "
                              "owner/name of letters, digits, '-', '_' and '.', such as 'gpt2' or "
                              "'openai-community/gpt2')")
    by_hand = (f"or put the files into a folder by hand (from https://huggingface.co/{name}/tree/main: {CONFIG}, "
               f"{WEIGHTS}, and tokenizer.json or preprocessor_config.json where it has them) and pass the folder")
    try:
        import huggingface_hub
    except ImportError:
        raise PretrainedError(f"{name!r} is not a local folder, and downloading it from the Hugging Face hub needs the "
                              f"huggingface_hub package: pip install -e \".[hub]\" (or pip install huggingface_hub), "
                              + by_hand) from None
    try:
        return huggingface_hub.snapshot_download(name, allow_patterns=FILES)
    except Exception as error:         # offline, unknown name, no access: huggingface_hub's own classes vary by version
        raise PretrainedError(f"could not fetch {name!r} from the Hugging Face hub with huggingface_hub "
                              f"({type(error).__name__}: "
                              f"{str(error).splitlines()[0] if str(error) else ''}). Connect to the network "
                              "(HF_HUB_OFFLINE must not be set for a first download), check the name, " + by_hand
                              ) from None


def load_model(cls, config_class, translation, name_or_folder, overrides=None):
    """cls(config) with the weights of a model folder or hub name, in the file's dtype and in eval mode; translation
    is the model family's map (config_from_hf, state_dict_from_hf), e.g. models/hf_gpt2.py; overrides: settings
    that replace config.json's (those that do not change the weights, such as dropout)."""
    folder = resolve(name_or_folder)
    config = config_class(**{**translation.config_from_hf(read_config(folder), folder), **(overrides or {})})
    state, origin = translation.state_dict_from_hf(read_weights(folder), config, folder)
    model = cls(config)
    _check_shapes(model, state, origin, folder)
    model.to(dtype=next(iter(state.values())).dtype)
    model.load_state_dict(state)
    return model.eval()


def _check_shapes(model, state, origin, folder):
    """Refuse, by the file's keys and in the file's layout, tensors whose shape the model does not have. (A function
    of its own: a loop variable left holding the last parameter, the head, would keep its first values alive while
    they are replaced, 150 MB more at the peak for GPT-2 small.)"""
    wrong = []
    for name, shape in ((name, tuple(own.shape)) for name, own in model.state_dict().items()):
        if name in state and tuple(state[name].shape) != shape:
            (key, transposed), stored = origin[name], tuple(state[name].shape)
            wrong.append(f"{key} is {stored[::-1] if transposed else stored}, the model needs "
                         f"{shape[::-1] if transposed else shape}")
    if wrong:
        raise PretrainedError(f"{folder} holds tensors of another shape than its {CONFIG} describes: "
                              + "; ".join(wrong[:5]) + (f" (and {len(wrong) - 5} more)" if len(wrong) > 5 else ""))


def read_json(path, missing):
    """The JSON object (a dict) in path; a missing file is refused with the message missing, a damaged one naming
    the file."""
    if not os.path.isfile(path):
        raise PretrainedError(missing)
    try:
        with open(path, encoding="utf-8") as file:
            content = json.load(file)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise PretrainedError(f"{path} is not valid JSON ({error})") from None
    except RecursionError:
        raise PretrainedError(f"{path} is not valid JSON (nested too deeply to read)") from None
    if not isinstance(content, dict):
        raise PretrainedError(f"{path} holds a {type(content).__name__}, not a JSON object of settings")
    return content


def read_config(folder):
    return read_json(os.path.join(folder, CONFIG), f"{folder} holds no {CONFIG}; a model folder needs it beside its "
                                                   "weights")


def read_weights(folder):
    """Every tensor of the folder's safetensors weights, as NumPy arrays by name."""
    single, index = os.path.join(folder, WEIGHTS), os.path.join(folder, INDEX)
    if os.path.isfile(single):
        return read_safetensors(single)
    if os.path.isfile(index):
        weight_map = read_json(index, f"{index} is not a file").get("weight_map")
        if not isinstance(weight_map, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                       for k, v in weight_map.items()):
            raise PretrainedError(f"{index} is damaged: its weight_map must map each tensor's name to the name of "
                                  f"its shard file, got {str(weight_map)[:200]}")
        weights = {}
        for shard in sorted(set(weight_map.values())):
            path = os.path.join(folder, shard)
            if not os.path.isfile(path):
                raise PretrainedError(f"{index} lists the shard {shard}, which is not in {folder}")
            weights.update(read_safetensors(path))
        absent = sorted(set(weight_map) - set(weights))
        if absent:
            raise PretrainedError(f"{index} places {absent[:5]} in shards that do not hold them")
        return weights
    pickled = [n for n in ("pytorch_model.bin", "tf_model.h5", "flax_model.msgpack") if os.path.exists(
        os.path.join(folder, n))]
    if pickled:
        raise PretrainedError(f"{folder} holds {pickled[0]} but no {WEIGHTS}. tinyattn reads safetensors only (a "
                              ".bin is pickled and could run code); in PyTorch, convert it with the class that keeps "
                              "the model's head (AutoModel drops it): model = AutoModelForCausalLM.from_pretrained("
                              "folder) for GPT-2 (or GPT2LMHeadModel), AutoModelForImageClassification for ViT; then "
                              f"model.save_pretrained(folder) writes {WEIGHTS}")
    raise PretrainedError(f"{folder} holds neither {WEIGHTS} nor {INDEX}")


def write_folder(folder, config, weights):
    """Write config (a dict) and weights (name -> tensor or array) as a model folder, as one save: both files are
    built and checked before anything in the folder changes (a setting that is not plain JSON is refused naming it),
    then written with replace_files. An earlier save's config.json, model.safetensors, index and shards are replaced
    or removed; every other file (tokenizer.json, preprocessor_config.json, a README) stays, as transformers keeps
    them."""
    folder = os.fspath(folder)
    text = json.dumps({key: _plain(key, value) for key, value in config.items()}, indent=2, sort_keys=True) + "\n"
    data = safetensors_bytes(weights, os.path.join(folder, WEIGHTS))
    os.makedirs(folder, exist_ok=True)
    superseded = [n for n in os.listdir(folder) if n == INDEX or SHARD.fullmatch(n)]
    replace_files(folder, {WEIGHTS: data, CONFIG: text.encode("utf-8")}, superseded)


SHARD = re.compile(r"model-\d+-of-\d+\.safetensors")


def _plain(key, value):
    """value as JSON holds it: NumPy scalars (vocab_size=ids.max() + 1) become Python numbers; anything else that
    JSON cannot hold is refused naming the setting."""
    if isinstance(value, numpy.generic):
        value = value.item()
    if isinstance(value, (list, tuple)):
        return [_plain(key, v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(f"{key}.{k}", v) for k, v in value.items()}
    if value is not None and not isinstance(value, (bool, int, float, str)):
        raise TypeError(f"save_pretrained: the setting {key}={value!r} is a {type(value).__name__}, which "
                        "config.json cannot hold; give it as a Python number, string or boolean")
    return value


def replace_files(folder, files, superseded=()):
    """Write files {name: bytes} into folder as one save and remove the superseded names: the folder never pairs
    files of two saves. Every file is first written to a temporary (a failed write, a full disk, changes nothing);
    then the old files are set aside, the last of files first (config.json: a crash in between leaves a folder
    without one, which nothing loads, rather than a mix), the new files are renamed in, in order, and only then are
    the old ones deleted; an error on the way puts the old ones back. Names that are symbolic links are written
    through, as atomic_write does."""
    targets = {name: os.path.realpath(os.path.join(folder, name)) for name in files}
    staged, aside, placed = {}, [], []
    try:
        for name, data in files.items():
            staged[name] = stage(targets[name], lambda file, data=data: file.write(data))
        for path in [targets[n] for n in reversed(list(files))] + [os.path.join(folder, n) for n in superseded]:
            if os.path.lexists(path):
                kept = f"{os.path.join(os.path.dirname(path), '.' + os.path.basename(path))}.tmp-{os.getpid()}-old"
                os.replace(path, kept)
                aside.append((kept, path))
        for name in files:
            os.replace(staged[name], targets[name])
            placed.append(targets[name])
            del staged[name]
    except BaseException:
        for path in placed:
            os.unlink(path)
        for kept, path in reversed(aside):
            os.replace(kept, path)
        for temporary in staged.values():
            os.unlink(temporary)
        raise
    for kept, _ in aside:
        os.unlink(kept)


def required(config, key, source):
    """config[key]; a key the model needs that config.json lacks is refused naming the file."""
    if key not in config:
        raise PretrainedError(f"{source}/{CONFIG} has no {key!r}, which the model needs")
    return config[key]
