"""The botocore SageMaker model as the API contract.

``model`` loads it; ``validate`` checks input against it (typed findings in AWS wording); ``conform`` shapes
output for the wire; ``patterns`` translates the model's Java regular expressions; ``render`` prints values
the way AWS messages do.
"""
