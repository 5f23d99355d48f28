"""Reading: tables, snapshots at any version, the lookup chain, watching versions."""
