"""Draw Draftlight's icon and write it in every format the installers need (needs Pillow).

    python installers/icons/make_icons.py

writes draftlight.png (512 px, Linux .desktop), draftlight.ico (Windows, 16-256 px) and
draftlight.icns (macOS) beside this file. The picture: a row of drafted tokens, three accepted
(bluish green), one corrected (vermillion, underlined), on a dark rounded square: what the app shows.
"""
from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageDraw

HERE = Path(__file__).resolve().parent
SIZE = 1024
BG = "#1E2430"
ACCEPTED = "#009E73"  # Okabe-Ito bluish green, as app/theme.py
CORRECTED = "#D55E00"  # Okabe-Ito vermillion
TEXT_LINE = "#C9D1DC"


def draw(size: int = SIZE) -> Image.Image:
    s = size / 1024
    img = Image.new("RGBA", (size, size), (0, 0, 0, 0))
    d = ImageDraw.Draw(img)
    d.rounded_rectangle([40 * s, 40 * s, 984 * s, 984 * s], radius=200 * s, fill=BG)
    # two faint lines of finished text above the live row
    for y, w in ((260, 640), (380, 520)):
        d.rounded_rectangle([170 * s, y * s, (170 + w) * s, (y + 56) * s], radius=28 * s, fill=TEXT_LINE)
    # the live round: three accepted draft tokens and the target's correction
    x = 170
    for i, w in enumerate((150, 110, 170)):
        d.rounded_rectangle([x * s, 540 * s, (x + w) * s, 700 * s], radius=36 * s, fill=ACCEPTED)
        x += w + 34
    d.rounded_rectangle([x * s, 540 * s, (x + 120) * s, 700 * s], radius=36 * s, fill=CORRECTED)
    d.rectangle([x * s, 740 * s, (x + 120) * s, 776 * s], fill=CORRECTED)  # underline: the second cue
    return img


def main() -> None:
    big = draw()
    big.resize((512, 512), Image.LANCZOS).save(HERE / "draftlight.png")
    big.save(HERE / "draftlight.ico", sizes=[(16, 16), (24, 24), (32, 32), (48, 48), (64, 64), (128, 128), (256, 256)])
    big.save(HERE / "draftlight.icns")
    for name in ("draftlight.png", "draftlight.ico", "draftlight.icns"):
        print(f"{name}: {(HERE / name).stat().st_size} bytes")


if __name__ == "__main__":
    main()
