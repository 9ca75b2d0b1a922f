"""Models: loading and checks (``loading.py``), the bundled wheels, named second models, and the model-shaped
parts of algorithms (a critic, a LoRA ensemble, PRISM's composed policy, a simulator's alignment).
"""
