"""``python -m materializer``: the materializer command (for process supervisors and tests)."""

from materializer.command import main

if __name__ == "__main__":
    main()
