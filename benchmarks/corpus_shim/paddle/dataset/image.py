"""paddle.dataset.image of Paddle 1.x (image helpers the models' readers import), on the
Pillow-backed cv2 of this shim. Images are HWC uint8 (BGR when colour), as Paddle's are."""
import numpy as np
import cv2


def load_image_bytes(bytes, is_color=True):
    return cv2.imdecode(np.frombuffer(bytes, dtype=np.uint8), 1 if is_color else 0)


def load_image(file, is_color=True):
    return cv2.imread(file, 1 if is_color else 0)


def resize_short(im, size):
    h, w = im.shape[:2]
    if h > w:
        h_new, w_new = size * h // w, size
    else:
        h_new, w_new = size, size * w // h
    return cv2.resize(im, (w_new, h_new), interpolation=cv2.INTER_CUBIC)


def to_chw(im, order=(2, 0, 1)):
    return im.transpose(order)


def center_crop(im, size, is_color=True):
    h, w = im.shape[:2]
    h0, w0 = (h - size) // 2, (w - size) // 2
    return im[h0:h0 + size, w0:w0 + size]


def random_crop(im, size, is_color=True):
    h, w = im.shape[:2]
    h0, w0 = np.random.randint(0, h - size + 1), np.random.randint(0, w - size + 1)
    return im[h0:h0 + size, w0:w0 + size]


def left_right_flip(im, is_color=True):
    return im[:, ::-1]


def simple_transform(im, resize_size, crop_size, is_train, is_color=True, mean=None):
    im = resize_short(im, resize_size)
    if is_train:
        im = random_crop(im, crop_size, is_color)
        if np.random.randint(2) == 0:
            im = left_right_flip(im, is_color)
    else:
        im = center_crop(im, crop_size, is_color)
    if len(im.shape) == 3:
        im = to_chw(im)
    im = im.astype("float32")
    if mean is not None:
        mean = np.array(mean, dtype=np.float32)
        if mean.ndim == 1 and is_color:
            mean = mean[:, np.newaxis, np.newaxis]
        im -= mean
    return im


def load_and_transform(filename, resize_size, crop_size, is_train, is_color=True, mean=None):
    return simple_transform(load_image(filename, is_color), resize_size, crop_size, is_train, is_color, mean)
