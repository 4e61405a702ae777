"""The bundle's entry point: the same `app.main:main` that `draftlight` and `python -m app` run."""
import sys

from app.main import main

if __name__ == "__main__":
    sys.exit(main())
