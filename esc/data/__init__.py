"""ESC-Role training data: source readers, the training mixture and chat tokenization."""
