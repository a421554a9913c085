"""The image preprocessing a Hugging Face vision model was trained with, read from its preprocessor_config.json:
resize (with the resampling filter it names), rescale (x 1/255), normalise by mean and std, channels first.
Resizing uses Pillow, which matplotlib already depends on."""
import os

import numpy

from .. import hub

# the integer codes preprocessor_config.json uses for "resample" (Pillow's own numbering)
RESAMPLE = {0: "NEAREST", 1: "LANCZOS", 2: "BILINEAR", 3: "BICUBIC", 4: "BOX", 5: "HAMMING"}


class ImageProcessor:
    def __init__(self, size=(224, 224), resample=2, do_resize=True, do_rescale=True, rescale_factor=1 / 255,
                 do_normalize=True, image_mean=(0.5, 0.5, 0.5), image_std=(0.5, 0.5, 0.5)):
        self.size, self.resample, self.do_resize = tuple(size), resample, do_resize
        self.do_rescale, self.rescale_factor = do_rescale, rescale_factor
        self.do_normalize = do_normalize
        self.image_mean, self.image_std = numpy.asarray(image_mean), numpy.asarray(image_std)

    @classmethod
    def from_pretrained(cls, name_or_folder):
        folder = hub.resolve(name_or_folder)
        path = os.path.join(folder, "preprocessor_config.json")
        settings = hub.read_json(path, f"{folder} holds no preprocessor_config.json, which says how its model's "
                                       "images were prepared")
        size = settings.get("size", {"height": 224, "width": 224})
        if isinstance(size, int):                              # older files: one number, a square
            size = {"height": size, "width": size}
        if not isinstance(size, dict) or not {"height", "width"} <= set(size):
            raise hub.PretrainedError(f"{path}: size {size} is not {{'height': H, 'width': W}} or one number, "
                                      "the forms ImageProcessor reads")
        keys = ("resample", "do_resize", "do_rescale", "rescale_factor", "do_normalize", "image_mean", "image_std")
        return cls(size=(size["height"], size["width"]), **{k: settings[k] for k in keys if k in settings})

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
        array = array.astype(numpy.float32)
        if self.do_rescale:
            array = array * numpy.float32(self.rescale_factor)
        if self.do_normalize:
            array = (array - self.image_mean.astype(numpy.float32)) / self.image_std.astype(numpy.float32)
        return numpy.ascontiguousarray(array.transpose(2, 0, 1)[None])
