"""Custom facts and operations, tested the way pyinfra tests its own: JSON fixtures.

tests/facts/<module>.<Fact>/<case>.json          -> deploys.facts.<module>.<Fact>
tests/operations/<module>.<operation>/<case>.json -> deploys.operations.<module>.<operation>
"""

from pathlib import Path

from pyinfra_testing.facts import make_fact_tests
from pyinfra_testing.operations import make_operation_tests

ROOT = Path(__file__).resolve().parent.parent

for folder in sorted((ROOT / "facts").glob("*.*")):
    cls = make_fact_tests("deploys.facts", folder.name, folder)
    globals()[f"TestFact_{folder.name.replace('.', '_')}"] = cls

for folder in sorted((ROOT / "operations").glob("*.*")):
    cls = make_operation_tests("deploys.operations", folder.name, folder)
    globals()[f"TestOp_{folder.name.replace('.', '_')}"] = cls

del cls
