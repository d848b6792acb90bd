"""The dress rehearsal of a site's documented path on this machine (docs/clusters.md, "Rehearsal"):
stand-ins for the centres' submit commands and launchers that check each directive and launch
option against the centre's documented rules (rules/*.yaml, a source per rule) and the site file,
refuse what the centre would refuse, and run what it would accept here, so real records come back."""
