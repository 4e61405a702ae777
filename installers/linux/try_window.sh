#!/usr/bin/env bash
# Start a built bundle under a virtual X server, wait for its window, screenshot it, and report
# how long the window took to appear. For checking a build on a machine without a desktop.
#
#   bash installers/linux/try_window.sh [BUNDLE_EXE] [SCREENSHOT.png]
#
# Defaults: dist/Draftlight/draftlight and dist/window.png. Needs xvfb, xauth, x11-utils
# (xwininfo, xprop) and imagemagick (import). Uses a throwaway DRAFTLIGHT_HOME, so the user's chats
# and models are not touched (the app starts as on a first run).
# TRY_MESSAGE="..." also types that message and presses Enter (needs xdotool), then waits
# TRY_WAIT seconds (default 20) before the screenshot; give the app models with DRAFTLIGHT_MODELS.
# TRY_CLICK="X Y" clicks there (window coordinates) first, e.g. into the message box.
set -euo pipefail
EXE="${1:-dist/Draftlight/draftlight}"
PNG="${2:-dist/window.png}"
for tool in Xvfb xwininfo xprop import; do
    command -v "$tool" >/dev/null || { echo "try_window.sh: $tool missing (apt-get install xvfb x11-utils imagemagick)" >&2; exit 2; }
done
[ -x "$EXE" ] || { echo "try_window.sh: $EXE is not an executable bundle" >&2; exit 2; }

DISPLAY_NUM="${TRY_DISPLAY:-:97}"
HOME_DIR="$(mktemp -d)"
Xvfb "$DISPLAY_NUM" -screen 0 1400x900x24 -nolisten tcp >/dev/null 2>&1 &
XVFB=$!
APP=""
cleanup() {
    [ -n "$APP" ] && kill "$APP" 2>/dev/null || true
    kill "$XVFB" 2>/dev/null || true
    rm -rf "$HOME_DIR"
}
trap cleanup EXIT
export DISPLAY="$DISPLAY_NUM"
for _ in $(seq 50); do xwininfo -root >/dev/null 2>&1 && break; sleep 0.1; done

start=$(date +%s.%N)
env -u QT_QPA_PLATFORM QT_QPA_PLATFORM=xcb DRAFTLIGHT_HOME="$HOME_DIR" "$EXE" >"$HOME_DIR/app.log" 2>&1 &
APP=$!
win=""
for _ in $(seq 600); do  # up to 60 s
    if ! kill -0 "$APP" 2>/dev/null; then
        echo "try_window.sh: the app exited before showing a window:" >&2
        cat "$HOME_DIR/app.log" >&2
        exit 1
    fi
    win="$(xwininfo -root -tree 2>/dev/null | grep -i '"Draftlight' | grep -v ' 1x1+' | head -1 | awk '{print $1}')" || true
    if [ -n "$win" ] && xwininfo -id "$win" 2>/dev/null | grep -q "IsViewable"; then break; fi
    win=""
    sleep 0.1
done
[ -n "$win" ] || { echo "try_window.sh: no Draftlight window within 60 s" >&2; cat "$HOME_DIR/app.log" >&2; exit 1; }
shown=$(date +%s.%N)
echo "window $win appeared after $(python3 -c "print(f'{$shown - $start:.1f}')") s: $(xwininfo -id "$win" | grep -E 'Width|Height' | tr -s ' ' | tr '\n' ' ')"
xprop -id "$win" WM_CLASS WM_NAME | sed 's/^/  /'
sleep "${TRY_SETTLE:-3}"  # let it finish painting (and any first-run dialog open)
if [ -n "${TRY_MESSAGE:-}" ]; then
    xdotool windowactivate --sync "$win" 2>/dev/null || xdotool windowfocus --sync "$win"
    # shellcheck disable=SC2086 # two numbers
    [ -n "${TRY_CLICK:-}" ] && xdotool mousemove --window "$win" $TRY_CLICK click 1
    xdotool type --delay 20 "$TRY_MESSAGE"
    xdotool key Return
    echo "typed: $TRY_MESSAGE"
    sleep "${TRY_WAIT:-20}"
fi
mkdir -p "$(dirname "$PNG")"
import -window root "$PNG"
echo "screenshot: $PNG"
if [ -s "$HOME_DIR/app.log" ]; then echo "app output:"; sed 's/^/  /' "$HOME_DIR/app.log" | tail -20; fi
