"""Generated contract modules (do not edit: run ``pydla deviceapi generate``)."""
