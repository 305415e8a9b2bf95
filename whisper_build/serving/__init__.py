"""Code that runs in the serving pod: Triton model, engines, audio, prompt, gateway, supervisor."""
