"""The LOGO turtle that ReGAL's programs call, as it runs *inside* `zoo.sandbox` (standard library only).

Its source is put in front of every LOGO program (see `zoo.regal.domains`), so it must import nothing outside the
standard library and do nothing at import time beyond definitions. The parent never executes LOGO programs: it
gets the pen-down segments back as plain data (``_regal_turtle.packed()``, a hex string) and renders them itself
(`zoo.regal.logo.render`).

Semantics follow the official `pyturtle.PyTurtle` (heading in radians, starting at 0 along +x; ``left`` and
``right`` take degrees; ``embed`` runs a code string and restores position, heading and pen afterwards) and the
constants of the official header. One deliberate difference: ``embed`` executes its string with the program's
own globals (where ``forward``, the helpers and the constants live) and ``local_vars`` as locals; the official
one uses the turtle module's globals and rewrites only a *leading* ``forward(``-style call, so an ``embed``
inside a helper function there raises NameError for every later primitive, and it also copies its own locals
(``x``, ``y``, ``theta``, ...) into the caller's namespace. Both quirks are dropped.
"""

import math
import struct

HALF_INF = 63
INF = 126
EPS_DIST = 1 / 20
EPS_ANGLE = 2.86


class _RegalTurtle:
    def __init__(self):
        self.x, self.y, self.angle, self.down = 0.0, 0.0, 0.0, True
        self.segments = []  # (x0, y0, x1, y1) of every pen-down move, in drawing order

    def packed(self):
        """The segments as one hex string of little-endian float64s: the parent decodes it with numpy in
        microseconds, where ``ast.literal_eval`` of the list's repr took ~25 ms per program."""
        flat = [v for seg in self.segments for v in seg]
        return struct.pack("<%dd" % len(flat), *flat).hex()


_regal_turtle = _RegalTurtle()


def forward(dist):
    t = _regal_turtle
    x1 = t.x + dist * math.cos(t.angle)
    y1 = t.y + dist * math.sin(t.angle)
    if t.down:
        t.segments.append((float(t.x), float(t.y), float(x1), float(y1)))
    t.x, t.y = x1, y1


def left(angle):
    _regal_turtle.angle += angle * math.pi / 180


def right(angle):
    _regal_turtle.angle -= angle * math.pi / 180


def teleport(x, y, theta):
    t = _regal_turtle
    t.x, t.y, t.angle = x, y, theta


def penup():
    _regal_turtle.down = False


def pendown():
    _regal_turtle.down = True


def position():
    return _regal_turtle.x, _regal_turtle.y


def heading():
    return _regal_turtle.angle


def isdown():
    return _regal_turtle.down


def embed(program, local_vars):
    """Run ``program`` (a string) in the current context, then return to the state before it."""
    t = _regal_turtle
    state = (t.x, t.y, t.angle, t.down)
    exec(program, globals(), local_vars)
    t.x, t.y, t.angle, t.down = state
