"""The protocol: the vocabulary of the log, its encodings and the rules every party applies (pure)."""
