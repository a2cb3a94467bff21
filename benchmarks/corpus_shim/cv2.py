"""The OpenCV calls the PaddlePaddle/models readers make, on Pillow and NumPy (no OpenCV here).

Images are uint8 HxWxC arrays in BGR order, as cv2 returns them."""
import numpy as np
from PIL import Image

IMREAD_COLOR, IMREAD_GRAYSCALE, IMREAD_UNCHANGED = 1, 0, -1
INTER_NEAREST, INTER_LINEAR, INTER_CUBIC, INTER_AREA, INTER_LANCZOS4 = 0, 1, 2, 3, 4
COLOR_BGR2RGB = COLOR_RGB2BGR = 4
COLOR_BGR2GRAY, COLOR_RGB2GRAY, COLOR_GRAY2BGR, COLOR_GRAY2RGB = 6, 7, 8, 8
BORDER_CONSTANT, BORDER_REFLECT = 0, 2
_FILTERS = {0: Image.NEAREST, 1: Image.BILINEAR, 2: Image.BICUBIC, 3: Image.BOX, 4: Image.LANCZOS}


def _from_pil(img, flags=IMREAD_COLOR):
    if flags == IMREAD_GRAYSCALE:
        return np.asarray(img.convert("L"))
    return np.ascontiguousarray(np.asarray(img.convert("RGB"))[:, :, ::-1])


def imread(path, flags=IMREAD_COLOR):
    try:
        return _from_pil(Image.open(path), flags)
    except (OSError, IOError):
        return None


def imdecode(buf, flags=IMREAD_COLOR):
    import io
    return _from_pil(Image.open(io.BytesIO(np.asarray(buf, dtype=np.uint8).tobytes())), flags)


def imwrite(path, img, params=None):
    Image.fromarray(np.asarray(img)[:, :, ::-1] if np.ndim(img) == 3 else np.asarray(img)).save(path)
    return True


def resize(img, dsize, dst=None, fx=None, fy=None, interpolation=INTER_LINEAR):
    img = np.asarray(img)
    h, w = img.shape[:2]
    if not dsize or dsize[0] == 0:
        dsize = (int(round(w * fx)), int(round(h * fy)))
    chans = [img] if img.ndim == 2 else [img[:, :, c] for c in range(img.shape[2])]
    out = [np.asarray(Image.fromarray(c.astype(np.float32) if c.dtype != np.uint8 else c)
                      .resize((int(dsize[0]), int(dsize[1])), _FILTERS.get(interpolation, Image.BILINEAR)))
           for c in chans]
    # OpenCV drops a single channel: an HxWx1 image comes back HxW
    out = out[0] if img.ndim == 2 or img.shape[2] == 1 else np.stack(out, axis=2)
    return out.astype(img.dtype)


def cvtColor(img, code):
    img = np.asarray(img)
    if code in (COLOR_BGR2GRAY, COLOR_RGB2GRAY):
        w = [0.114, 0.587, 0.299] if code == COLOR_BGR2GRAY else [0.299, 0.587, 0.114]
        return (img[:, :, :3] @ np.array(w)).astype(img.dtype)
    if code == COLOR_GRAY2BGR:
        return np.repeat(img[:, :, None], 3, axis=2)
    return np.ascontiguousarray(img[:, :, ::-1])


def flip(img, code):
    img = np.asarray(img)
    return img[::-1] if code == 0 else (img[:, ::-1] if code > 0 else img[::-1, ::-1])


def getRotationMatrix2D(center, angle, scale):
    a = np.deg2rad(angle)
    al, be = scale * np.cos(a), scale * np.sin(a)
    cx, cy = center
    return np.array([[al, be, (1 - al) * cx - be * cy], [-be, al, be * cx + (1 - al) * cy]])


def warpAffine(img, M, dsize, flags=INTER_LINEAR, borderMode=BORDER_CONSTANT, borderValue=0):
    img = np.asarray(img)
    inv = np.linalg.inv(np.vstack([M, [0, 0, 1]]))[:2].ravel()
    pil = Image.fromarray(img)
    return np.asarray(pil.transform((int(dsize[0]), int(dsize[1])), Image.AFFINE, tuple(inv),
                                    _FILTERS.get(flags, Image.BILINEAR)))


def copyMakeBorder(img, top, bottom, left, right, borderType=BORDER_CONSTANT, value=0):
    pad = [(top, bottom), (left, right)] + [(0, 0)] * (np.ndim(img) - 2)
    if borderType == BORDER_CONSTANT:
        return np.pad(img, pad, constant_values=value if np.isscalar(value) else 0)
    return np.pad(img, pad, mode="reflect")
