"""What tests of both tiers share beyond conftest's fixtures: small models, readers of what a run writes.

tests/ is on sys.path (pytest puts conftest.py's folder there), so a test imports `from testkit.models import ...`.
"""
