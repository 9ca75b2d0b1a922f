"""Multi-turn episodes (issue 18): environments that own one episode, tool-call protocols, and the
trained-token mask of an episode. Not yet wired into the trainer or a config group (see base.py)."""
