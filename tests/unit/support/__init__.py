"""Shared fakes and case loaders of the tests (imported as a package, no sys.path edits)."""
