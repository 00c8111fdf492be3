"""The engine that plays role-player x target dialogues for ESC-Eval (`evaluate.py`): context
policy, waves and streams, the job."""
