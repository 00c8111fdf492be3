"""Dialogue files: conversion to and from the official repo's format, and merging shards."""
