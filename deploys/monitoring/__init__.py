"""What kvceph gives the operator's Prometheus and Grafana: scrape targets, rules, a dashboard.

Pure package: settings and the inventory in, plain data out (``targets``, ``rules``,
``dashboard``); ``figures`` holds the one definition of "hit", "saved" and "pays" that
status.py uses too. The stage that writes the files is ``deploys/stages/monitoring.py``.
"""
