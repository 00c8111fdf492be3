"""Hard seekers (issue 65): each chatbot's change from the cooperative seeker, and whether the
role-player played the hard seeker (`rank.py mode=robustness`, docs/seekers.md)."""
