"""The image preprocessing a Hugging Face vision model was trained with, read from its preprocessor_config.json:
resize (with the resampling filter it names), centre crop, rescale (x 1/255), normalise by mean and std, channels
first, in that order, as transformers' image processors do. Resizing uses Pillow, which matplotlib already depends
on. A setting that would change the pixels in a way this class does not know is refused naming it, never dropped."""
import os

import numpy

from .. import hub

# the integer codes preprocessor_config.json uses for "resample" (Pillow's own numbering)
RESAMPLE = {0: "NEAREST", 1: "LANCZOS", 2: "BILINEAR", 3: "BICUBIC", 4: "BOX", 5: "HAMMING"}
# the settings this class reads ...
READ = ("do_resize", "size", "resample", "do_center_crop", "crop_size", "do_rescale", "rescale_factor",
        "do_normalize", "image_mean", "image_std")
# ... and those that leave an RGB image's pixels alone (names, output formats; size's reading for older files)
INERT = ("image_processor_type", "feature_extractor_type", "processor_class", "_processor_class", "do_convert_rgb",
         "input_data_format", "return_tensors", "default_to_square", "disable_grouping", "device")


class ImageProcessor:
    def __init__(self, size=(224, 224), resample=2, do_resize=True, do_rescale=True, rescale_factor=1 / 255,
                 do_normalize=True, image_mean=(0.5, 0.5, 0.5), image_std=(0.5, 0.5, 0.5), do_center_crop=False,
                 crop_size=(224, 224)):
        self.size, self.resample, self.do_resize = tuple(size), resample, do_resize
        self.do_center_crop, self.crop_size = do_center_crop, tuple(crop_size)
        self.do_rescale, self.rescale_factor = do_rescale, rescale_factor
        self.do_normalize = do_normalize
        self.image_mean, self.image_std = numpy.asarray(image_mean), numpy.asarray(image_std)

    @classmethod
    def from_pretrained(cls, name_or_folder):
        folder = hub.resolve(name_or_folder)
        path = os.path.join(folder, "preprocessor_config.json")
        settings = hub.read_json(path, f"{folder} holds no preprocessor_config.json, which says how its model's "
                                       "images were prepared")
        unknown = [k for k, v in settings.items() if k not in READ + INERT and v not in (None, False)]
        if unknown or settings.get("data_format", "channels_first") != "channels_first":
            raise hub.PretrainedError(f"{path} sets {', '.join(unknown) or 'data_format'}, which ImageProcessor "
                                      f"does not apply (it applies {', '.join(READ)}); prepare the images with "
                                      "transformers' image processor instead")
        if isinstance(settings.get("size"), int) and settings.get("default_to_square") is False:
            raise hub.PretrainedError(f"{path}: size {settings['size']} with default_to_square false is the shortest "
                                      "edge, which ImageProcessor does not resize to (it takes height and width)")
        keys = ("resample", "do_resize", "do_rescale", "rescale_factor", "do_normalize", "image_mean", "image_std",
                "do_center_crop")
        return cls(size=_height_width(settings.get("size", {"height": 224, "width": 224}), "size", path),
                   crop_size=_height_width(settings.get("crop_size", {"height": 224, "width": 224}), "crop_size",
                                           path), **{k: settings[k] for k in keys if k in settings})

    def __call__(self, image):
        """An RGB image (H, W, 3), uint8 0-255 (or float 0-1 with do_rescale off) -> a float32 array (1, 3, h, w)."""
        array = numpy.asarray(image)
        if array.ndim != 3 or array.shape[-1] != 3:
            raise ValueError(f"ImageProcessor takes one RGB image of shape (height, width, 3), got {array.shape}")
        if self.do_resize and array.shape[:2] != self.size:
            from PIL import Image
            if array.dtype != numpy.uint8:
                raise ValueError(f"resizing takes a uint8 image (0-255), got {array.dtype}")
            filter = getattr(Image.Resampling, RESAMPLE[self.resample])
            array = numpy.asarray(Image.fromarray(array).resize(self.size[::-1], filter))
        if self.do_center_crop:
            array = center_crop(array, *self.crop_size)
        array = array.astype(numpy.float32)
        if self.do_rescale:
            array = array * numpy.float32(self.rescale_factor)
        if self.do_normalize:
            array = (array - self.image_mean.astype(numpy.float32)) / self.image_std.astype(numpy.float32)
        return numpy.ascontiguousarray(array.transpose(2, 0, 1)[None])


def center_crop(array, height, width):
    """The (height, width) middle of an (H, W, C) image as transformers crops it: an odd margin leaves its extra
    pixel at the bottom and right (the top is (H - height) // 2); an image smaller than the crop is first padded
    with zeros, the extra pixel of an odd padding at the bottom and right."""
    pad_h, pad_w = max(height - array.shape[0], 0), max(width - array.shape[1], 0)
    if pad_h or pad_w:
        array = numpy.pad(array, ((pad_h // 2, (pad_h + 1) // 2), (pad_w // 2, (pad_w + 1) // 2), (0, 0)))
    top, left = (array.shape[0] - height) // 2, (array.shape[1] - width) // 2
    return array[top:top + height, left:left + width]


def _height_width(size, key, path):
    """(height, width) from {'height': H, 'width': W} or one number (older files: a square)."""
    if isinstance(size, int):
        size = {"height": size, "width": size}
    if not isinstance(size, dict) or not {"height", "width"} <= set(size):
        raise hub.PretrainedError(f"{path}: {key} {size} is not {{'height': H, 'width': W}} or one number, "
                                  "the forms ImageProcessor reads")
    return size["height"], size["width"]
