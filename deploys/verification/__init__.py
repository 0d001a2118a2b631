"""Pure logic of verify.py: the cold -> warm -> cold proof, testable without a lab."""
