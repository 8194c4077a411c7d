"""head rules (being written)."""
from __future__ import annotations

from ..rule import Rule

RULES: list[Rule] = []
