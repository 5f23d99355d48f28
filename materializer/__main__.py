"""``python -m segcat.materializer``: the materializer command (for process supervisors and tests)."""

from segcat.materializer.command import main

if __name__ == "__main__":
    main()
