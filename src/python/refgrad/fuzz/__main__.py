"""python -m refgrad.fuzz: the refgrad-fuzz command (refgrad.fuzz.runner)."""
import sys

from refgrad.fuzz.runner import main

if __name__ == "__main__":
    sys.exit(main())
