"""Example plans, releases, CI results and the demo's release, shipped inside the package as data
(``ablate.examples``) so that an installed Ablate can run ``ablate demo`` without a checkout."""
