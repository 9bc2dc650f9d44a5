"""Who is asking: API keys, identity-provider tokens (OIDC), the Caller of each request, and the
audit trail of what it was shown."""
