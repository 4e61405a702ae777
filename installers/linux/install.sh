#!/usr/bin/env bash
# Install Draftlight for the current user (no root): run from the unpacked tarball.
#
#   ./install.sh              install into ~/.local (or $XDG_DATA_HOME) and add it to the app menu
#   ./install.sh --uninstall  remove it again (your chats, settings and models are kept)
#
# Where things go:
#   ~/.local/share/draftlight-app/           the application (this folder's Draftlight/); named apart from
#                                            ~/.local/share/Draftlight, where your chats and models live
#   ~/.local/bin/draftlight                  a link, so `draftlight` works in a terminal
#   ~/.local/share/applications/draftlight.desktop and the hicolor icon: the app menu entry
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
DATA="${XDG_DATA_HOME:-$HOME/.local/share}"
BIN="$HOME/.local/bin"
APP_DIR="$DATA/draftlight-app"
DESKTOP="$DATA/applications/draftlight.desktop"
ICON="$DATA/icons/hicolor/512x512/apps/draftlight.png"
SVG="$DATA/icons/hicolor/scalable/apps/draftlight.svg"

refresh_menus() {
    command -v update-desktop-database >/dev/null && update-desktop-database -q "$DATA/applications" || true
    # Refresh an existing icon cache only: a new one that nothing else keeps up to date would hide
    # icons other apps install later.
    touch "$DATA/icons/hicolor" 2>/dev/null || true
    if [ -f "$DATA/icons/hicolor/icon-theme.cache" ] && command -v gtk-update-icon-cache >/dev/null; then
        gtk-update-icon-cache -q -t "$DATA/icons/hicolor" 2>/dev/null || true
    fi
}

if [ "${1:-}" = "--uninstall" ]; then
    rm -rf "$APP_DIR"
    rm -f "$DESKTOP" "$ICON" "$SVG"
    [ -L "$BIN/draftlight" ] && rm -f "$BIN/draftlight"
    refresh_menus
    echo "Draftlight removed. Your chats, settings and models are still in ~/.local/share/Draftlight and ~/.config/Draftlight."
    exit 0
fi

if [ ! -x "$HERE/Draftlight/draftlight" ]; then
    echo "install.sh: $HERE/Draftlight/draftlight is missing: run this from the unpacked Draftlight tarball" >&2
    exit 1
fi

mkdir -p "$DATA/applications" "$(dirname "$ICON")" "$(dirname "$SVG")" "$BIN"
rm -rf "$APP_DIR.new"
cp -a "$HERE/Draftlight" "$APP_DIR.new"  # copy first, swap after: a failed copy leaves the old install
rm -rf "$APP_DIR"
mv "$APP_DIR.new" "$APP_DIR"
install -m 644 "$HERE/draftlight.png" "$ICON"
install -m 644 "$HERE/draftlight.svg" "$SVG"
sed "s|@EXEC@|$APP_DIR/draftlight|g" "$HERE/draftlight.desktop" > "$DESKTOP"
chmod 644 "$DESKTOP"
ln -sfn "$APP_DIR/draftlight" "$BIN/draftlight"
refresh_menus

echo "Draftlight installed in $APP_DIR"
echo "  Start it from your application menu, or run: $BIN/draftlight"
echo "  Check the installation:                      $BIN/draftlight --self-test"
case ":$PATH:" in *":$BIN:"*) ;; *) echo "  ($BIN is not on your PATH: add it to run 'draftlight' by name)";; esac
