"""Light and dark themes, and the look of each token source.

Colours come from the Okabe-Ito palette (safe for the common colour-vision deficiencies), and
every source also differs without colour, so the view reads in a greyscale screenshot too:

| source     | colour cue                  | cue that survives greyscale                        |
|------------|-----------------------------|----------------------------------------------------|
| accepted   | bluish-green shading        | shading ~1.6:1 (light) / ~2.2:1 (dark) vs the page |
| correction | vermillion text             | bold, wavy underline                               |
| bonus      | blue text                   | italic, dotted underline                           |
| target     | none                        | plain text                                         |
| rejected   | reddish-purple              | struck through                                     |

Every text colour keeps >= 4.5:1 (WCAG) against the page, the code background and the shading;
tests/app/test_app_access.py measures it and the greyscale differences on rendered pixels. Prompt
lookup has no mark of its own: its drafts are accepted tokens like a model's (the reply's header
names the drafter).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QFont, QGuiApplication, QPainter, QPalette, QPen, QTextCharFormat
from PySide6.QtWidgets import QApplication, QProxyStyle, QStyle, QStyleFactory

from engine.decoding.events import TokenSource


class Theme(StrEnum):
    """Which palette the window uses."""

    SYSTEM = "system"
    LIGHT = "light"
    DARK = "dark"


class Mark(StrEnum):
    """What a piece of reply text is, for styling: a token source, or a rejected draft token."""

    ACCEPTED = "accepted"
    CORRECTION = "correction"
    BONUS = "bonus"
    TARGET = "target"
    REJECTED = "rejected"

    @staticmethod
    def of(source: TokenSource) -> "Mark":
        return Mark(source.value)


#: Okabe & Ito (2008), "Color Universal Design".
OKABE_ITO = {
    "orange": "#E69F00",
    "sky_blue": "#56B4E9",
    "bluish_green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "reddish_purple": "#CC79A7",
}

LABELS = {
    Mark.ACCEPTED: "accepted draft",
    Mark.CORRECTION: "target's correction",
    Mark.BONUS: "bonus token",
    Mark.TARGET: "target alone",
    Mark.REJECTED: "rejected draft",
}

EXPLANATIONS = {
    Mark.ACCEPTED: "the drafter proposed it and the target agreed (shaded)",
    Mark.CORRECTION: "the drafter was wrong here; the target put its own token (bold, wavy underline)",
    Mark.BONUS: "the whole draft was right; the target added one more (italic, dotted underline)",
    Mark.TARGET: "no draft this round: plain decoding (plain text)",
    Mark.REJECTED: "what the drafter had proposed before the correction (struck through)",
}


@dataclass(frozen=True, slots=True)
class TokenColours:
    """The colours one theme gives the token marks."""

    accepted_bg: str
    """Background shading of accepted draft tokens."""
    correction_fg: str
    """Text colour of corrections."""
    bonus_fg: str
    """Text colour of bonus tokens."""
    rejected_fg: str
    """Text colour of rejected draft tokens."""
    code_bg: str
    """Background of code inside a reply."""
    muted_fg: str
    """Headers and notes."""
    page_bg: str
    """The chat's page (the palette's Base)."""
    text_fg: str
    """Body text (the palette's Text); accepted tokens keep it on their shading."""
    warning_fg: str
    """Text that warns (a nearly full context), readable on the window background."""


LIGHT_COLOURS = TokenColours(
    accepted_bg="#99D8C7",  # bluish green at 40% over white: 1.6:1 against the page, 13:1 under black text
    correction_fg="#B34700",  # vermillion, darkened to 5:1 contrast on white
    bonus_fg=OKABE_ITO["blue"],
    rejected_fg="#9E4F7E",  # reddish purple, darkened for contrast
    code_bg="#F2F2F2",
    muted_fg="#636363",
    page_bg="#FFFFFF",
    text_fg="#000000",
    warning_fg="#A34100",
)
DARK_COLOURS = TokenColours(
    accepted_bg="#0F5E48",  # bluish green at 50% over the page: 2.2:1 against it, 6:1 under the text
    correction_fg="#FF8A3D",  # vermillion, lightened for contrast on dark
    bonus_fg=OKABE_ITO["sky_blue"],
    rejected_fg="#E3A3C8",
    code_bg="#2B2B2B",
    muted_fg="#A0A0A0",
    page_bg="#1E1E1E",
    text_fg="#E6E6E6",
    warning_fg="#FF9F5A",
)


def system_is_dark() -> bool:
    """The OS asks for a dark scheme (Qt 6.5+ reports it; unknown reads as light)."""
    app = QGuiApplication.instance()
    return app is not None and app.styleHints().colorScheme() == Qt.ColorScheme.Dark


def is_dark(theme: Theme) -> bool:
    if theme == Theme.DARK:
        return True
    if theme == Theme.LIGHT:
        return False
    return system_is_dark()


def colours_for(theme: Theme) -> TokenColours:
    return DARK_COLOURS if is_dark(theme) else LIGHT_COLOURS


def mark_format(mark: Mark, colours: TokenColours, highlight: bool = True) -> QTextCharFormat:
    """The character format of one mark; with highlighting off, every token reads as plain text."""
    fmt = QTextCharFormat()
    if mark == Mark.REJECTED:  # shown only on request, and always marked: it is not part of the reply
        fmt.setForeground(QColor(colours.rejected_fg))
        fmt.setFontStrikeOut(True)
        return fmt
    if not highlight:
        return fmt
    if mark == Mark.ACCEPTED:
        fmt.setBackground(QColor(colours.accepted_bg))
    elif mark == Mark.CORRECTION:
        fmt.setForeground(QColor(colours.correction_fg))
        fmt.setFontWeight(QFont.Weight.Bold)
        fmt.setUnderlineStyle(QTextCharFormat.UnderlineStyle.WaveUnderline)
        fmt.setUnderlineColor(QColor(colours.correction_fg))
    elif mark == Mark.BONUS:
        fmt.setForeground(QColor(colours.bonus_fg))
        fmt.setFontItalic(True)
        fmt.setUnderlineStyle(QTextCharFormat.UnderlineStyle.DotLine)
        fmt.setUnderlineColor(QColor(colours.bonus_fg))
    return fmt


def _luminance(c: QColor) -> float:
    lin = [v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4 for v in (c.redF(), c.greenF(), c.blueF())]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def readable(colour: QColor | str, background: QColor | str, ratio: float = 4.5) -> QColor:
    """`colour`, moved toward black (or white on a dark background) just enough for `ratio`:1
    WCAG contrast on `background`: for colours the theme does not choose (syntax highlighting)
    drawn on a token's shading."""
    fg, bg = QColor(colour), QColor(background)
    bg_l = _luminance(bg)
    end = QColor("#000000") if bg_l > 0.18 else QColor("#FFFFFF")

    def ok(c: QColor) -> bool:
        hi, lo = sorted((_luminance(c), bg_l), reverse=True)
        return (hi + 0.05) / (lo + 0.05) >= ratio

    for step in range(21):
        t = step / 20
        c = QColor.fromRgbF(*(a + (b - a) * t for a, b in ((fg.redF(), end.redF()), (fg.greenF(), end.greenF()),
                                                           (fg.blueF(), end.blueF()))))
        if ok(c):
            return c
    return end


def palette_for(theme: Theme) -> QPalette:
    """A Fusion palette: Qt's light default, or a dark one; page and text as the token colours assume."""
    if not is_dark(theme):
        app = QApplication.instance()
        p = app.style().standardPalette() if app else QPalette()
        for role, colour in ((QPalette.ColorRole.Base, LIGHT_COLOURS.page_bg), (QPalette.ColorRole.Text, LIGHT_COLOURS.text_fg)):
            p.setColor(QPalette.ColorGroup.Active, role, QColor(colour))
            p.setColor(QPalette.ColorGroup.Inactive, role, QColor(colour))
        return p
    p = QPalette()
    base, window, text = QColor(DARK_COLOURS.page_bg), QColor("#2A2A2A"), QColor(DARK_COLOURS.text_fg)
    for role, colour in (
        (QPalette.ColorRole.Window, window),
        (QPalette.ColorRole.WindowText, text),
        (QPalette.ColorRole.Base, base),
        (QPalette.ColorRole.AlternateBase, QColor("#262626")),
        (QPalette.ColorRole.ToolTipBase, QColor("#333333")),
        (QPalette.ColorRole.ToolTipText, text),
        (QPalette.ColorRole.Text, text),
        (QPalette.ColorRole.Button, QColor("#333333")),
        (QPalette.ColorRole.ButtonText, text),
        (QPalette.ColorRole.BrightText, QColor("#FF6B6B")),
        (QPalette.ColorRole.Link, QColor(OKABE_ITO["sky_blue"])),
        (QPalette.ColorRole.Highlight, QColor("#3D6FA8")),
        (QPalette.ColorRole.HighlightedText, QColor("#FFFFFF")),
        (QPalette.ColorRole.PlaceholderText, QColor("#8A8A8A")),
    ):
        p.setColor(role, colour)
    for role in (QPalette.ColorRole.Text, QPalette.ColorRole.WindowText, QPalette.ColorRole.ButtonText):
        p.setColor(QPalette.ColorGroup.Disabled, role, QColor("#7A7A7A"))
    return p


def indicator_outline(palette: QPalette) -> QColor:
    """The outline of a check box or radio button: half way from the window to its text, then moved just enough
    to keep 3:1 (WCAG's contrast for the edge of a control) against the window."""
    window, text = palette.color(QPalette.ColorRole.Window), palette.color(QPalette.ColorRole.WindowText)
    mid = QColor.fromRgbF(*((a + b) / 2 for a, b in ((window.redF(), text.redF()), (window.greenF(), text.greenF()),
                                                     (window.blueF(), text.blueF()))))
    return readable(mid, window, 3.0)


class _Style(QProxyStyle):
    """Fusion, with check boxes and radio buttons outlined in `indicator_outline`: Fusion draws their edge one
    shade off the window, and on the dark theme an unchecked box (Auto) all but vanished (#212121 on #2A2A2A)."""

    def drawPrimitive(self, element, option, painter, widget=None) -> None:
        super().drawPrimitive(element, option, painter, widget)
        round_ = element == QStyle.PrimitiveElement.PE_IndicatorRadioButton
        if not (round_ or element == QStyle.PrimitiveElement.PE_IndicatorCheckBox):
            return
        if option.state & QStyle.StateFlag.State_HasFocus and option.state & QStyle.StateFlag.State_KeyboardFocusChange:
            return  # Fusion's focus outline says more
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        painter.setPen(QPen(indicator_outline(option.palette), 1.0))
        painter.setBrush(Qt.BrushStyle.NoBrush)
        r = QRectF(option.rect).adjusted(0.5, 0.5, -0.5, -0.5)
        if round_:
            painter.drawEllipse(r)
        else:
            painter.drawRect(r)
        painter.restore()


def apply_theme(app: QApplication, theme: Theme) -> None:
    if not isinstance(app.style(), _Style):
        app.setStyle(_Style(QStyleFactory.create("Fusion")))
    app.setPalette(palette_for(theme))
