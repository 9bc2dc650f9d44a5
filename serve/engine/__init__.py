"""The generator engine and the model files behind it: vLLM, model packages and their conversion, a
model hub for online machines."""
