"""Pieces every graphfeed service shares."""
