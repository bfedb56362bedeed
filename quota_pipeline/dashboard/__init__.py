"""What an operator sees of the decision topic: a web page (`dashboard`) and a terminal view (`tail`)."""
