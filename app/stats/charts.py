"""Two small charts drawn with QPainter (PySide6-Essentials has no QtCharts)."""
from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPainterPath, QPalette, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from app.core.theme import OKABE_ITO

_MARGIN_L, _MARGIN_R, _MARGIN_T, _MARGIN_B = 34, 8, 18, 20
#: Okabe-Ito hues; on a light background darkened to >= 3:1 (WCAG's contrast for graphics).
_LIGHT = {"bar": "#00855F", "line": OKABE_ITO["blue"], "plain": "#A86A00"}
_DARK = {"bar": OKABE_ITO["bluish_green"], "line": OKABE_ITO["sky_blue"], "plain": OKABE_ITO["orange"]}


class _Chart(QWidget):
    def __init__(self, title: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = title
        self.setAccessibleName(f"Chart: {title}")
        self.setMinimumHeight(120)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)

    def sizeHint(self) -> QSize:
        return QSize(240, 140)

    def colour(self, role: str) -> QColor:
        light = self.palette().color(QPalette.ColorRole.Window).lightness() > 128
        return QColor((_LIGHT if light else _DARK)[role])

    def _plot_rect(self) -> QRectF:
        return QRectF(_MARGIN_L, _MARGIN_T, max(10, self.width() - _MARGIN_L - _MARGIN_R),
                      max(10, self.height() - _MARGIN_T - _MARGIN_B))

    def _frame(self, p: QPainter, y_max: float, y_fmt: str | None) -> QRectF:
        """Title and grid; the y axis numbered unless `y_fmt` is None (nothing plotted has a scale yet)."""
        pal = self.palette()
        text = pal.color(QPalette.ColorRole.WindowText)
        grid = QColor(text)
        grid.setAlpha(40)
        r = self._plot_rect()
        p.setPen(text)
        f = p.font()
        f.setPointSizeF(max(7.0, f.pointSizeF() * 0.85))
        p.setFont(f)
        p.drawText(QRectF(0, 0, self.width(), _MARGIN_T - 2), Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                   self.title)
        for frac in (0.0, 0.5, 1.0):
            y = r.bottom() - frac * r.height()
            p.setPen(QPen(grid, 1))
            p.drawLine(QPointF(r.left(), y), QPointF(r.right(), y))
            if y_fmt is not None:
                p.setPen(text)
                p.drawText(QRectF(0, y - 8, _MARGIN_L - 4, 16), Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
                           y_fmt.format(frac * y_max))
        return r

    def _empty(self, p: QPainter, r: QRectF, text: str) -> None:
        c = self.palette().color(QPalette.ColorRole.WindowText)
        c.setAlpha(120)
        p.setPen(c)
        p.drawText(r, Qt.AlignmentFlag.AlignCenter, text)


class AcceptanceChart(_Chart):
    """Bars: share of drafted tokens accepted at each draft position (1 = first drafted token)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Accepted, by draft position", parent)
        self.values: tuple[float, ...] = ()

    def set_values(self, values: Sequence[float]) -> None:
        values = tuple(values)
        if values != self.values:
            self.values = values
            self.update()

    def paintEvent(self, _event) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        r = self._frame(p, 1.0, "{:.0%}")
        if not self.values:
            self._empty(p, r, "no drafts yet")
            return
        n = len(self.values)
        slot = r.width() / n
        bar = self.colour("bar")
        text = self.palette().color(QPalette.ColorRole.WindowText)
        for i, v in enumerate(self.values):
            h = max(0.0, min(1.0, v)) * r.height()
            x = r.left() + i * slot + slot * 0.15
            p.fillRect(QRectF(x, r.bottom() - h, slot * 0.7, h), bar)
            if n <= 16 and (n <= 8 or i % 2 == 0):
                p.setPen(text)
                p.drawText(QRectF(r.left() + i * slot, r.bottom() + 2, slot, _MARGIN_B - 2),
                           Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop, str(i + 1))


class SpeedChart(_Chart):
    """A line: cumulative tokens/s against tokens emitted, one point per round."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Tokens/s", parent)
        self.points: tuple[tuple[int, float], ...] = ()
        self.plain: float | None = None

    def set_points(self, points: Sequence[tuple[int, float]], plain: float | None = None) -> None:
        points = tuple(points)
        if points != self.points or plain != self.plain:
            self.points, self.plain = points, plain
            self.update()

    def paintEvent(self, _event) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        top = max([v for _, v in self.points] + [self.plain or 0.0, 0.1]) * 1.15
        # Before a reply's first token there is no speed to scale by: an axis of "0.11" tokens/s read as a measurement.
        fmt = "{:.0f}" if top >= 20 else "{:.1f}" if top >= 2 else "{:.2f}"
        r = self._frame(p, top, fmt if self.points or self.plain else None)
        if len(self.points) < 1:
            self._empty(p, r, "no tokens yet")
            return
        x_max = max(self.points[-1][0], 1)

        def at(x: float, y: float) -> QPointF:
            return QPointF(r.left() + x / x_max * r.width(), r.bottom() - y / top * r.height())

        if self.plain:
            pen = QPen(self.colour("plain"), 1.5, Qt.PenStyle.DashLine)
            p.setPen(pen)
            p.drawLine(at(0, self.plain), at(x_max, self.plain))
        points = self.points
        limit = max(2, int(r.width()))
        if len(points) > limit:  # a long reply: one point per pixel column is all the eye can see
            step = len(points) / limit
            points = tuple(points[int(i * step)] for i in range(limit)) + (points[-1],)
        path = QPainterPath(at(*points[0]) if len(points) > 1 else at(0, points[0][1]))
        for x, y in points[1:] if len(points) > 1 else points:
            path.lineTo(at(x, y))
        p.setPen(QPen(self.colour("line"), 2))
        p.drawPath(path)
        p.setPen(self.palette().color(QPalette.ColorRole.WindowText))
        p.drawText(QRectF(r.left(), r.bottom() + 2, r.width(), _MARGIN_B - 2),
                   Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignTop, f"{x_max} tokens")
        if self.plain:
            # Key for the dashed line, right-aligned above the plot, after the title and never over it.
            fm = p.fontMetrics()
            key = "plain decoding (est.)"
            left = fm.horizontalAdvance(self.title) + 12
            room = self.width() - _MARGIN_R - left - 22
            if room < fm.horizontalAdvance(key):
                key = fm.elidedText(key, Qt.TextElideMode.ElideRight, max(0, room))
            x0 = max(left, self.width() - _MARGIN_R - 22 - fm.horizontalAdvance(key))
            y = _MARGIN_T / 2
            p.setPen(QPen(self.colour("plain"), 1.5, Qt.PenStyle.DashLine))
            p.drawLine(QPointF(x0, y), QPointF(x0 + 18, y))
            p.setPen(self.palette().color(QPalette.ColorRole.WindowText))
            p.drawText(QRectF(x0 + 22, 0, self.width() - x0 - 22, _MARGIN_T - 2),
                       Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, key)
