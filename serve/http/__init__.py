"""The HTTP surface: the FastAPI app over the Gateway, OpenAI's shapes, the OpenAPI document,
streaming, the Responses API, the request guard and the routes."""
