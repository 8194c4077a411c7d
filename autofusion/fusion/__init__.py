"""Fusion: the pattern language, the rule library, the rewrite driver and the report."""
from .pipeline import optimize, rule_names
from .report import FusionReport
from .rule import NearMiss, Rule, apply_rules
from .rules import RULES

__all__ = ["optimize", "rule_names", "FusionReport", "NearMiss", "Rule", "apply_rules", "RULES"]
