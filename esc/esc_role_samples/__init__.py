"""ESC-Role supervised fine-tuning (SFT) samples: source readers, the training mixture, chat tokenization."""
