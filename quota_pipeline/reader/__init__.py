"""The Python reader of the decision topic: what a broker takes from it and answers (the Java plugins' twin)."""
