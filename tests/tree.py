"""Where things are, for tests in any folder: the tests' own folder (helpers, data) and the project root."""
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
