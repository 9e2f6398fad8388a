Bej
locationext.binj
offset64j
length12p