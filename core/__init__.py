"""Plain helpers every layer shares, with no models and no project imports: the clock, ids, exact JSON,
errors, identities, the command-field rules, input limits and RFC 3339 times."""
