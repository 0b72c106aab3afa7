"""The docker backend: the engine, the images cells run in, and hardened one-shot cell containers."""
