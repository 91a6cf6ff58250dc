"""Independent reference implementations, vendored for parity tests."""
