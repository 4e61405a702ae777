"""Turn the app's icon (resources/icons/draftlight-512.png, drawn by the app) into the formats the
Windows and macOS installers need (needs Pillow):

    python installers/icons/make_icons.py

writes draftlight.ico (16-256 px) and draftlight.icns beside this file. Linux uses the PNG and SVG
from resources/icons directly. Rerun when the app's icon changes.
"""
from __future__ import annotations

from pathlib import Path

from PIL import Image

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent.parent / "resources" / "icons" / "draftlight-512.png"


def main() -> None:
    big = Image.open(SOURCE).convert("RGBA")
    big.save(HERE / "draftlight.ico", sizes=[(16, 16), (24, 24), (32, 32), (48, 48), (64, 64), (128, 128), (256, 256)])
    big.save(HERE / "draftlight.icns")
    for name in ("draftlight.ico", "draftlight.icns"):
        print(f"{name}: {(HERE / name).stat().st_size} bytes")


if __name__ == "__main__":
    main()
