"""What settings models are made of beyond `esc.config_rules`: field types (`types`) and the nodes
a registry's class validates (`plugins`)."""
