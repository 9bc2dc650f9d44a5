"""What a request may use: token budgets and the usage ledger, fair admission per tenant."""
