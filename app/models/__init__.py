"""Model files and pairs on screen: the model bar and sampling controls, the Models dialog, first run."""
