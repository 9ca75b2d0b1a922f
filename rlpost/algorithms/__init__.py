"""rlpost's own algorithms: what composition cannot express (PPO's critic + GAE: ``ppo.py``, ``critic.py``)."""


def trainer_class(run):
    """The trainer class of a built run: PPOTrainer when ``algorithm.critic`` is set, else RLPostTrainer."""
    if run.algorithm.critic is not None:
        from rlpost.algorithms.ppo import PPOTrainer

        return PPOTrainer
    from rlpost.trainer import RLPostTrainer

    return RLPostTrainer
