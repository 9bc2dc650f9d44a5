"""Operating the appliance: starting and stopping it, backups, the demo."""
