"""Role-player x target dialogues for ESC-Eval: prompts, the turn-synchronous engine, storage."""
