"""Two targets' dialogues of one card, one dimension, both orders: win rates and Bradley-Terry strengths."""
