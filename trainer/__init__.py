"""Training on verl: data conversion, rewards, advantage estimators, SGLS tool, agent loop, configs, launch.

The only package that imports torch and verl — but only in the modules that need them, so that
`trainer.rewards` and `trainer.convert` work in an install without the `train` extra.
"""
