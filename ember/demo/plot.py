"""A loss-curve PNG without matplotlib: rasterize polylines into an RGB array and encode it
with zlib (PNG needs nothing more)."""
import struct
import zlib

import numpy as np

_COLORS = [(31, 119, 180), (255, 127, 14), (44, 160, 44)]


def _png(rgb):
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))

    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def _line(img, x0, y0, x1, y1, color):
    n = int(max(abs(x1 - x0), abs(y1 - y0))) + 1
    xs = np.linspace(x0, x1, n).round().astype(int)
    ys = np.linspace(y0, y1, n).round().astype(int)
    for dy in (0, 1):                                     # 2 px thick
        img[np.clip(ys + dy, 0, img.shape[0] - 1), np.clip(xs, 0, img.shape[1] - 1)] = color


def save_curves(path, curves, width=640, height=360, margin=40):
    """Write ``curves`` ({name: [y0, y1, ...]}) as a line chart PNG; y on a log scale when
    the values span more than 10x. Returns the path."""
    img = np.full((height, width, 3), 255, np.uint8)
    vals = np.concatenate([np.asarray(v, float) for v in curves.values() if len(v)])
    log = vals.min() > 0 and vals.max() / vals.min() > 10
    tf = np.log10 if log else (lambda v: np.asarray(v, float))
    lo, hi = tf(vals).min(), tf(vals).max()
    hi = hi if hi > lo else lo + 1
    x0, x1, y0, y1 = margin, width - margin // 2, height - margin, margin // 2
    for gy in np.linspace(y1, y0, 5):                    # grid and axes
        img[int(gy), x0:x1] = 225
    img[y1:y0 + 1, x0] = img[y0, x0:x1] = 0
    for (name, ys), color in zip(curves.items(), _COLORS):
        ys = tf(np.asarray(ys, float))
        if len(ys) < 2:
            continue
        px = x0 + np.arange(len(ys)) / (len(ys) - 1) * (x1 - x0)
        py = y0 - (ys - lo) / (hi - lo) * (y0 - y1)
        for i in range(len(ys) - 1):
            _line(img, px[i], py[i], px[i + 1], py[i + 1], color)
    with open(path, "wb") as f:
        f.write(_png(img))
    return path
