"""The RL trainer (`agentrl.train.trainer.Trainer`) and its config.

`import agentrl` makes this package callable: `agentrl.train(config, ...)` is the Python
API's run of a config (`agentrl._train`, documented there). A function named `train` in
`agentrl` would be replaced by this package as soon as one of its modules is imported.
"""
