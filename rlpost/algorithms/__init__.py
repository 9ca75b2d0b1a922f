"""rlpost's own algorithms: what composition cannot express (PPO's critic + GAE: ``ppo.py``, ``critic.py``; offline REGEN: ``regen.py``)."""


def trainer_class(run):
    """The trainer class of a built run: PPOTrainer when ``algorithm.critic`` is set,
    RegenTrainer when ``algorithm.replay`` is, else RLPostTrainer."""
    if run.algorithm.critic is not None:
        from rlpost.algorithms.ppo import PPOTrainer

        return PPOTrainer
    if run.algorithm.offline is not None:  # algorithm=regen: batches from recorded replays
        from rlpost.algorithms.regen import RegenTrainer

        return RegenTrainer
    from rlpost.trainer import RLPostTrainer

    return RLPostTrainer
