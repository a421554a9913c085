"""Model folders in Hugging Face's layout: find one (a local folder, or a hub name fetched by huggingface_hub into
its usual cache), read its config.json and its safetensors weights (one file or shards listed in
model.safetensors.index.json), and write one.

This file knows folders and files only; what the keys and settings mean for a model family is translated beside the
model (models/hf_gpt2.py, models/hf_vit.py).
"""
import json
import os

from .serialization import atomic_write, read_safetensors, safetensors_bytes

WEIGHTS, INDEX, CONFIG = "model.safetensors", "model.safetensors.index.json", "config.json"
# what a model folder holds that tinyattn reads; a hub download fetches only these
FILES = [CONFIG, WEIGHTS, INDEX, "model-*.safetensors", "tokenizer.json", "preprocessor_config.json"]


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


def load_model(cls, config_class, translation, name_or_folder):
    """cls(config) with the weights of a model folder or hub name, in the file's dtype and in eval mode; translation
    is the model family's map (config_from_hf, state_dict_from_hf), e.g. models/hf_gpt2.py."""
    folder = resolve(name_or_folder)
    config = config_class(**translation.config_from_hf(read_config(folder), folder))
    state = translation.state_dict_from_hf(read_weights(folder), config, folder)
    model = cls(config).to(dtype=next(iter(state.values())).dtype)
    model.load_state_dict(state)
    return model.eval()


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
        weight_map = read_json(index, f"{index} is not a file").get("weight_map", {})
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
                              ".bin is pickled and could run code); in PyTorch, convert it: model = "
                              "AutoModel.from_pretrained(folder); model.save_pretrained(folder) writes "
                              f"{WEIGHTS}")
    raise PretrainedError(f"{folder} holds neither {WEIGHTS} nor {INDEX}")


def write_folder(folder, config, weights):
    """Write config (a dict) and weights (name -> tensor or array) as a model folder; each file atomically, the
    weights first, so a folder whose config.json is readable never has half-written weights."""
    folder = os.fspath(folder)
    os.makedirs(folder, exist_ok=True)
    data = safetensors_bytes(weights, os.path.join(folder, WEIGHTS))
    atomic_write(os.path.join(folder, WEIGHTS), lambda file: file.write(data))
    text = json.dumps(config, indent=2, sort_keys=True) + "\n"
    atomic_write(os.path.join(folder, CONFIG), lambda file: file.write(text.encode("utf-8")))


def required(config, key, source):
    """config[key]; a key the model needs that config.json lacks is refused naming the file."""
    if key not in config:
        raise PretrainedError(f"{source}/{CONFIG} has no {key!r}, which the model needs")
    return config[key]
